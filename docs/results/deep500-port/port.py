"""Port Deep500's 24 user-facing items into OUT by the steps of docs/porting-from-deep500.md alone.

    python port.py DEEP500_CHECKOUT EUROMPI19_CHECKOUT OUT [--gpu]

Notebooks become scripts whose code cells are separated by '# %%' lines (run them with
run_cells.py, which runs each cell as Jupyter would); shell lines ('!pip ...') are commented out.
Step 1 (imports) is the guide's sed line; step 3 (devices) applies without --gpu; step 4 (TensorFlow 1)
to the two tf_native samples; conv_overhead_tensorflow.py loses the unused conv_op import.
"""
import json
import pathlib
import re
import sys

SAMPLES = ["accelegrad", "dataset_latency", "distributed_training", "mnist_bias", "network_inference", "onnxtest",
           "synthetic_dataset", "tf_native_operator", "tf_native_training", "train_mnist", "train_until",
           "ucf101_resnetlstm"]
DEEPBENCH = [f"{kind}_overhead_{fw}" for kind in ("gemm", "conv") for fw in ("pytorch", "tensorflow", "caffe2")]


def imports(text):  # step 1: the guide's sed line
    text = re.sub(r"^(\s*)(import|from) deep500( |\.)", r"\1\2 deep500lite\3", text, flags=re.M)
    text = text.replace("'deep500.frameworks.", "'deep500lite.frameworks.")
    return text.replace("from recipes.recipe import", "from deep500lite.recipe import")


def devices(text):  # step 3, on a machine without a GPU
    text = text.replace("d5.GPUDevice()", "d5.CPUDevice()")
    text = text.replace("torch.device('cuda')", "torch.device('cuda' if torch.cuda.is_available() else 'cpu')")
    return re.sub(r"^(\s*)torch\.cuda\.synchronize\(\)", r"\1if dev.type == 'cuda': torch.cuda.synchronize()",
                  text, flags=re.M)


def tf1(text):  # step 4: TensorFlow 1 graph mode
    return re.sub(r"^import tensorflow as tf$", "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()",
                  text, count=1, flags=re.M)


def notebook(path):
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    code = [re.sub(r"^(\s*)!", r"\1# !", c, flags=re.M) for c in code]
    return "\n# %%\n".join(code) + "\n"


def main(d5, euro, out, gpu):
    items = {}
    for name in SAMPLES:
        items[f"samples/{name}.py"] = (d5 / "samples" / f"{name}.py").read_text()
    for name in DEEPBENCH + ["deepbench"]:
        items[f"samples/deepbench/{name}.py"] = (d5 / "samples" / "deepbench" / f"{name}.py").read_text()
    for name in ("cifar10_resnet44", "imagenet_resnet50"):
        items[f"recipes/{name}.py"] = (d5 / "recipes" / f"{name}.py").read_text()
    for name in ("1_mnist", "2_manual", "3_custom"):
        items[f"nb/{name}.py"] = notebook(euro / f"{name}.ipynb")
    items["nb/custom_optimizer.py"] = notebook(d5 / "tutorials" / "custom_optimizer.ipynb")
    for rel, text in items.items():
        text = imports(text)
        if not gpu:
            text = devices(text)
        if rel.startswith("samples/tf_native_"):
            text = tf1(text)
        if rel.endswith("conv_overhead_tensorflow.py"):
            text = re.sub(r"^from deep500lite\.frameworks\.reference\.custom_operators\.python import conv_op\n", "",
                          text, flags=re.M)
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    print(f"{len(items)} files in {out} (24 items and deepbench.py's problem list)")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--gpu"]
    if len(args) != 3:
        sys.exit(__doc__)
    main(*(pathlib.Path(a) for a in args), gpu="--gpu" in sys.argv)
