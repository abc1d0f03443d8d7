"""The device a trial really ran on, read from inside the trial's process.

A slot says which GPUs a trial *may* use (``CUDA_VISIBLE_DEVICES``); what it used
is read afterwards, in the worker, from two independent sources:

* ``torch_device``: the device torch computed on, when the workload initialised
  CUDA in this process -- its ordinal, name, ``uuid`` and PCI bus id (from
  ``torch.cuda.get_device_properties``), and the NVML index that uuid has
  (:func:`tuner.gpu.list_gpus`; NVML numbers devices in PCI order);
* ``nvml_indices``: the NVML indices on which NVML saw the trial's process tree
  hold memory during the measurement (covers programs a command adapter starts).

With ``cuda_visible_devices`` and ``cuda_device_order`` (the slot's environment:
the runner sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that the NVML indices it puts
in ``CUDA_VISIBLE_DEVICES`` mean the same devices to CUDA). Never raises; what
cannot be read is left out with the reason under ``unavailable``.
"""

from __future__ import annotations

import os
from typing import Any

from tuner.evaluators.cuda_api import torch_cuda_in_use


def device_used(nvml_indices: list[int]) -> dict[str, Any]:
    """The record described in the module docstring (JSON-serialisable)."""
    record: dict[str, Any] = {
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
        "nvml_indices": list(nvml_indices),
    }
    cuda = torch_cuda_in_use()
    if cuda is None:
        record["unavailable"] = {"torch_device": "the trial did not initialise CUDA in the worker process"}
        return record
    try:
        index = int(cuda.current_device())
        properties = cuda.get_device_properties(index)
        uuid = str(getattr(properties, "uuid", "") or "")
        torch_device: dict[str, Any] = {"index": index, "name": str(properties.name), "uuid": uuid}
        domain, bus, device = (
            getattr(properties, key, None) for key in ("pci_domain_id", "pci_bus_id", "pci_device_id")
        )
        if isinstance(domain, int) and isinstance(bus, int) and isinstance(device, int):
            torch_device["pci_bus_id"] = f"{domain:08x}:{bus:02x}:{device:02x}.0"
        torch_device["nvml_index"] = _nvml_index_of(uuid)
        record["torch_device"] = torch_device
    except Exception as error:  # noqa: BLE001 - a fact we could not read, not a failed trial
        record["unavailable"] = {"torch_device": f"{type(error).__name__}: {error}"}
    return record


def _nvml_index_of(uuid: str) -> int | None:
    """The NVML index of the device whose uuid is ``uuid`` (torch prints it without ``GPU-``)."""
    from tuner.gpu import list_gpus

    wanted = uuid.removeprefix("GPU-")
    if not wanted:
        return None
    for gpu in list_gpus():
        if gpu.uuid.removeprefix("GPU-") == wanted:
            return gpu.index
    return None
