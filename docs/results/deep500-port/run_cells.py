"""Run a notebook's code cells (separated by '# %%' lines) like Jupyter: one namespace, each cell's
last expression printed, a failing cell reported in one line and the next cells still run."""
import ast, sys, traceback
src = open(sys.argv[1]).read().split("# %%\n")
ns = {"__name__": "__main__"}
for i, cell in enumerate(src, 1):
    if not cell.strip():
        continue
    tree = ast.parse(cell)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    try:
        exec(compile(tree, f"<cell {i}>", "exec"), ns)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), f"<cell {i}>", "eval"), ns)
            if value is not None:
                print(f"[cell {i}] ->", repr(value))
    except Exception as exc:
        print(f"[cell {i}] FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    sys.stdout.flush()
