"""A Python process that runs a page's Python blocks one at a time in one namespace, like notebook cells.

Started by the docs test as ``python notebook.py REPLY_FD``: each line on stdin is a JSON string (a
block's code); after running it, one JSON line goes to REPLY_FD: ``{"ok": true}`` or ``{"ok": false,
"error": TRACEBACK}``. The blocks' own output goes to this process's stdout and stderr.
"""

import json
import os
import sys
import traceback


def main() -> int:
    reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    sys.path.insert(0, os.getcwd())  # as in `python` started in the page's folder: its files import
    namespace = {"__name__": "__main__"}
    for line in sys.stdin:
        code = json.loads(line)
        try:
            exec(compile(code, "<docs block>", "exec"), namespace)  # noqa: S102 - the docs' own blocks
            answer = {"ok": True}
        except SystemExit as exc:
            answer = {"ok": exc.code in (None, 0), "error": f"SystemExit({exc.code!r})"}
        except BaseException:  # noqa: BLE001 - reported to the test, which fails with it
            answer = {"ok": False, "error": traceback.format_exc(limit=8)}
        sys.stdout.flush()
        sys.stderr.flush()
        reply.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
