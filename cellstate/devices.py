"""GPU devices in the resource model: a machine's GPUs are extra resources, one per device.

A machine with ``n`` GPUs carries, beside its CPU and memory, the extra resources ``gpu``
(the sum, ``n × 1000`` milli) and ``gpu.0`` … ``gpu.<n-1>`` (1000 milli each); its model
is the label ``gpu_model``. The ledger (``Machine.allocated``) therefore keeps the free milli
of every device, and every fit check, conflict re-check and overcommit check of the existing
resource code works per device with no special case.

A machine whose capacity names no device keeps ``gpu`` as a plain counted resource (what it
was before devices: traces and cells that count GPUs still work, nothing is bound there).

A task asks for GPUs through its request's ``gpu`` amount alone: below 1000 milli it is a
*share* of one device (``gpu_milli``), a multiple of 1000 is that many *whole* devices
(``num_gpu``). An allowed set of models is a constraint ``gpu_model in [...]``. A placement
*binds* the request to named devices (``bind``): the claim holds ``gpu`` plus ``gpu.<i>``
for each chosen device, which is what the allocation stores (the task's visible devices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cellstate.model import Constraint, ConstraintOp
from cellstate.resources import Resources

GPU = "gpu"
DEVICE_PREFIX = "gpu."
MILLI = 1000
MODEL_LABEL = "gpu_model"
MAX_DEVICES = 64


class DeviceError(ValueError):
    """A GPU request or device layout that the model cannot hold."""


def device_name(index: int) -> str:
    """The extra-resource name of device ``index`` (``gpu.3``)."""
    return f"{DEVICE_PREFIX}{index}"


def device_index(name: str) -> int | None:
    """The index of a device resource name, None for any other name."""
    if not name.startswith(DEVICE_PREFIX):
        return None
    digits = name[len(DEVICE_PREFIX):]
    return int(digits) if digits.isdigit() and (digits == "0" or not digits.startswith("0")) else None


def gpu_capacity(count: int) -> dict[str, int]:
    """The extra resources of a machine with ``count`` GPUs (empty for none)."""
    if not 0 <= count <= MAX_DEVICES:
        raise DeviceError(f"gpu count must be 0..{MAX_DEVICES}, got {count}")
    out = {GPU: count * MILLI} if count else {}
    out.update({device_name(i): MILLI for i in range(count)})
    return out


def device_count(capacity: Resources) -> int:
    """How many GPU devices a capacity vector holds."""
    return sum(1 for name, _ in capacity.extra if device_index(name) is not None)


def device_free(capacity: Resources, allocated: Resources) -> list[int]:
    """Free milli of each device of a machine, by index (``capacity`` minus ``allocated``)."""
    return devices_in(capacity - allocated, device_count(capacity))


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """What one task asks of GPUs: ``count`` devices with ``milli`` each (a share: count 1)."""

    count: int
    milli: int

    @property
    def total(self) -> int:
        return self.count * self.milli

    @property
    def shared(self) -> bool:
        return self.milli < MILLI


def gpu_ask(request: Resources) -> GpuAsk | None:
    """The GPU part of a task's request, None when it asks for no GPU. DeviceError when the
    amount is neither a share (< 1000) nor whole devices (a multiple of 1000), or when the
    request already names devices (only a bound claim does)."""
    total = 0
    for name, amount in request.extra:
        if name == GPU:
            total = amount
        elif name.startswith(DEVICE_PREFIX):
            raise DeviceError(f"a task's request cannot name a device ({name}); ask for '{GPU}'")
    if total > MILLI and total % MILLI:
        raise DeviceError(f"gpu request {total} milli is neither a share (< {MILLI}) nor whole GPUs "
                          f"(a multiple of {MILLI})")
    return ask_of(total)


def ask_of(total: int) -> GpuAsk | None:
    """The ask a ``gpu`` amount of milli stands for: a share of one device below 1000, else
    whole devices (the amount's thousands); None for no GPU."""
    if total <= 0:
        return None
    return GpuAsk(1, total) if total < MILLI else GpuAsk(total // MILLI, MILLI)


def model_constraint(models: Iterable[str]) -> Constraint:
    """The constraint that keeps a task on machines of the GPU ``models``."""
    return Constraint(MODEL_LABEL, ConstraintOp.IN, tuple(models))



def ask_request(num_gpu: int, gpu_milli: int) -> int:
    """The ``gpu`` amount of a task asking for ``num_gpu`` GPUs of ``gpu_milli`` each, as the
    trace and job files state it (``num_gpu`` 1 with ``gpu_milli`` < 1000 is a share; more
    GPUs are whole). DeviceError for an impossible pair."""
    if num_gpu < 0 or gpu_milli < 0:
        raise DeviceError(f"num_gpu and gpu_milli must be >= 0, got {num_gpu} and {gpu_milli}")
    if num_gpu == 0:
        return 0
    if gpu_milli == 0 or gpu_milli > MILLI:
        raise DeviceError(f"gpu_milli must be 1..{MILLI} when num_gpu > 0, got {gpu_milli}")
    if num_gpu > 1 and gpu_milli != MILLI:
        raise DeviceError(f"a share of a GPU ({gpu_milli} milli) is for one GPU, not {num_gpu}")
    if num_gpu > MAX_DEVICES:
        raise DeviceError(f"num_gpu must be <= {MAX_DEVICES}, got {num_gpu}")
    return num_gpu * gpu_milli


def claimed_devices(resources: Resources) -> tuple[tuple[int, int], ...]:
    """(index, milli) of each device a bound claim or allocation holds, by index."""
    out = [(i, amount) for name, amount in resources.extra if (i := device_index(name)) is not None]
    return tuple(sorted(out))


def visible_devices(resources: Resources) -> str:
    """The device indices an allocation holds, as a runtime exposes them (``"0,3"``; empty for
    none)."""
    return ",".join(str(i) for i, _ in claimed_devices(resources))


def bind(request: Resources, ask: GpuAsk, devices: tuple[int, ...]) -> Resources:
    """``request`` bound to ``devices``: the same request holding ``ask.milli`` of each."""
    if len(devices) != ask.count or len(set(devices)) != len(devices):
        raise DeviceError(f"{ask.count} distinct device(s) needed, got {devices}")
    extra = dict(request.extra)
    for i in devices:
        extra[device_name(i)] = ask.milli
    return Resources(request.cpu, request.memory, request.disk, tuple(sorted(extra.items())))


def fitting_devices(free: list[int], ask: GpuAsk) -> list[int]:
    """Indices of devices that can hold one unit of ``ask`` (a share: free >= milli; whole:
    entirely free)."""
    return [i for i, f in enumerate(free) if f >= ask.milli]


def first_fit(free: list[int], ask: GpuAsk) -> tuple[int, ...] | None:
    """The default binding: a share on the fullest device it fits (best fit, lowest index on
    ties), whole GPUs on the lowest-indexed free devices; None when the devices cannot hold it."""
    fit = fitting_devices(free, ask)
    if len(fit) < ask.count:
        return None
    if ask.shared:
        return (min(fit, key=lambda i: (free[i], i)),)
    return tuple(fit[:ask.count])


def devices_in(resources: Resources, count: int | None = None) -> list[int]:
    """The amount of each device a vector holds, by index (absent devices hold 0): of a
    machine's free resources, the free milli of every device. ``count``: that many entries
    (a machine's device count), else up to the highest index held."""
    amounts: dict[int, int] = {}
    for name, amount in resources.extra:
        i = device_index(name)
        if i is not None:
            amounts[i] = amount
    out = [0] * (count if count is not None else max(amounts) + 1 if amounts else 0)
    for i, amount in amounts.items():
        if i < len(out):
            out[i] = amount
    return out


def _gpu_parts(request: Resources) -> tuple[int, list[tuple[int, int]]]:
    """A request's ``gpu`` amount and the (index, amount) of each device it names."""
    total, named = 0, []
    for name, amount in request.extra:
        if name == GPU:
            total = amount
        elif (i := device_index(name)) is not None:
            named.append((i, amount))
    return total, named


def bind_in(request: Resources, free: Resources) -> Resources | None:
    """``request`` with its GPU ask held by devices that have room in ``free``: ``request``
    itself when it asks for no GPU or the devices it names still have room; else bound anew
    (``first_fit``: a decision's device choice gives way when another scheduler took that device
    meanwhile, as long as another device of the machine has room); None when no devices can
    hold it."""
    if not request.extra:
        return request
    total, named = _gpu_parts(request)
    ask = ask_of(total)
    if ask is None:
        return request
    if len(named) == ask.count and all(amount <= free.get(device_name(i)) for i, amount in named):
        return request
    frees = devices_in(free)
    if not frees and not named:
        return request  # no device has room, or the machine has none: ``gpu`` is a plain counted resource
    devices = first_fit(frees, ask)
    if devices is None:
        return None
    base = Resources(request.cpu, request.memory, request.disk,
                     tuple((n, a) for n, a in request.extra if device_index(n) is None))
    return bind(base, ask, devices)


def binding_problem(request: Resources, capacity: Resources) -> str | None:
    """Why a claim's ``request`` is not a valid device binding on a machine of ``capacity``
    (its GPU ask not held by exactly its count of existing devices, ``milli`` each), else None."""
    total, named = _gpu_parts(request)
    if total <= 0 and not named:
        return None
    if not named and device_count(capacity) == 0:
        return None  # a machine without devices: ``gpu`` is a plain counted resource there
    if total <= 0 or (total >= MILLI and total % MILLI):
        return f"gpu {total} is not a share or whole GPUs"
    ask = ask_of(total)
    assert ask is not None  # total > 0 here
    if len(named) != ask.count or any(amount != ask.milli for _, amount in named):
        return f"gpu {total} must be held by {ask.count} device(s) of {ask.milli} milli, got {dict(named)}"
    missing = [i for i, _ in named if capacity.get(device_name(i)) <= 0]
    if missing:
        return f"device(s) {missing} do not exist on the machine"
    return None
