"""Level 1: networks and graph executors."""

from deep500lite.lv1.device import CPUDevice, Device, GPUDevice, as_device
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import Network, load_model

__all__ = ["Network", "load_model", "GraphExecutor", "Device", "CPUDevice", "GPUDevice", "as_device"]
