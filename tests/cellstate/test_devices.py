"""GPU devices as extra resources: asks, bindings, per-device free milli."""

from __future__ import annotations

import pytest

from cellstate.devices import (
    DeviceError, GpuAsk, ask_request, bind, claimed_devices, device_free, device_index, best_fit, gpu_ask,
    gpu_capacity,
)
from cellstate.resources import Resources


def res(cpu=0, mem=0, **extra) -> Resources:
    return Resources(cpu, mem, 0, tuple(sorted((k.replace("_", "."), v) for k, v in extra.items())))


def test_a_machine_with_gpus_carries_the_sum_and_one_resource_per_device():
    assert gpu_capacity(2) == {"gpu": 2000, "gpu.0": 1000, "gpu.1": 1000}
    assert gpu_capacity(0) == {}
    with pytest.raises(DeviceError):
        gpu_capacity(65)


def test_device_names_parse_strictly():
    assert device_index("gpu.3") == 3
    assert device_index("gpu.03") is None
    assert device_index("gpu.x") is None
    assert device_index("gpus") is None


def test_asks_are_a_share_or_whole_devices():
    assert gpu_ask(res(gpu=500)) == GpuAsk(1, 500)
    assert gpu_ask(res(gpu=3000)) == GpuAsk(3, 1000)
    assert gpu_ask(res(cpu=1)) is None
    with pytest.raises(DeviceError, match="neither a share"):
        gpu_ask(res(gpu=1500))
    with pytest.raises(DeviceError, match="cannot name a device"):
        gpu_ask(res(gpu=500, gpu_0=500))


@pytest.mark.parametrize("num, milli, expected", [(0, 0, 0), (0, 700, 0), (1, 460, 460), (2, 1000, 2000)])
def test_the_trace_pair_becomes_one_amount(num, milli, expected):
    assert ask_request(num, milli) == expected


@pytest.mark.parametrize("num, milli", [(2, 500), (1, 0), (1, 1001), (-1, 100), (65, 1000)])
def test_impossible_trace_pairs_are_refused(num, milli):
    with pytest.raises(DeviceError):
        ask_request(num, milli)


def test_binding_names_the_devices_and_the_ledger_keeps_free_milli_per_device():
    capacity = res(8000, 100, gpu=4000, gpu_0=1000, gpu_1=1000, gpu_2=1000, gpu_3=1000)
    share = bind(res(1000, 10, gpu=300), GpuAsk(1, 300), (2,))
    whole = bind(res(1000, 10, gpu=2000), GpuAsk(2, 1000), (0, 1))
    assert claimed_devices(share) == ((2, 300),)
    assert claimed_devices(whole) == ((0, 1000), (1, 1000))
    used = share + whole
    assert device_free(capacity, used) == [0, 0, 700, 1000]
    assert res(0, 0, gpu=700, gpu_2=700).fits_in(capacity - used)
    assert not res(0, 0, gpu=800, gpu_2=800).fits_in(capacity - used)
    assert not res(0, 0, gpu=500, gpu_1=500).fits_in(capacity - used)
    with pytest.raises(DeviceError):
        bind(res(gpu=2000), GpuAsk(2, 1000), (1, 1))


def test_default_binding_is_best_fit_for_shares_and_lowest_free_for_whole():
    free = [1000, 400, 700, 1000]
    assert best_fit(free, GpuAsk(1, 300)) == (1,)
    assert best_fit(free, GpuAsk(1, 500)) == (2,)
    assert best_fit(free, GpuAsk(2, 1000)) == (0, 3)
    assert best_fit(free, GpuAsk(3, 1000)) is None
