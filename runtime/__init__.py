"""The runtime: devices, placement, the executor and Session."""
from .device import CPUDevice, Device
from .device_discovery import find_device, list_devices, register_device_discovery
from .executor import Plan
from .placer import place
from .session import Session, SessionConfig, SessionStats
from .tracing import NodeEvent, RunMetadata, RunOptions

__all__ = ["CPUDevice", "Device", "NodeEvent", "Plan", "RunMetadata", "RunOptions", "Session", "SessionConfig", "SessionStats",
           "find_device", "list_devices", "place", "register_device_discovery"]
