"""GPU inventory and architecture family, found without initialising CUDA.

The pytest controller must never create a CUDA context: it would pin memory on every GPU and break
the CUDA_VISIBLE_DEVICES pinning of the servers and xdist workers started later. So detection asks
NVML (nvidia-ml-py) first, then `nvidia-smi`, and otherwise reports a CPU-only machine. Both see
every GPU of the host; the run takes only those its CUDA_VISIBLE_DEVICES leaves it (a shared host,
a Slurm allocation), keeping their physical indices for the servers' own CUDA_VISIBLE_DEVICES,
and of those only GPUs of one model outside MIG mode (`one_model`), which the baseline key names.
`--specdec-arch` replaces the inventory with a simulated one for dry runs, laid over the GPUs the
run was given: those slots stay real GPUs (`GPU.real`; a dry run's servers run on them and claim
them host-wide), and a slot beyond them is no GPU, which a server on a GPU host never sees.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from .errors import SpecdecUsageError

#: Compute-capability major/minor -> family. One table so that a new chip is a one-line change.
FAMILIES: dict[str, str] = {
    "sm_80": "ampere",
    "sm_86": "ampere",
    "sm_87": "ampere",
    "sm_89": "ada",
    "sm_90": "hopper",
    "sm_100": "blackwell",
    "sm_101": "blackwell",
    "sm_103": "blackwell",
    "sm_110": "blackwell",
    "sm_120": "blackwell",
    "sm_121": "blackwell",
}

#: Families that mark tests (`pytest -m blackwell`); `cpu` is the embedded default's own matrix.
GPU_FAMILIES = ("blackwell", "hopper", "ada", "ampere")
ALL_FAMILIES = GPU_FAMILIES + ("cpu",)

_ARCH_RE = re.compile(r"^sm_?(\d{2,3})a?$")


def normalise_arch(text: str) -> str:
    """`sm_120`, `sm120`, `sm_90a`, `9.0` and `12.0` all name an arch; return the `sm_NN` form."""
    raw = text.strip().lower()
    match = _ARCH_RE.match(raw)
    if match:
        return f"sm_{match.group(1)}"
    cap = re.match(r"^(\d+)\.(\d)$", raw)
    if cap:
        return f"sm_{cap.group(1)}{cap.group(2)}"
    raise SpecdecUsageError(
        f"--specdec-arch {text!r} is not a GPU architecture; use a compute capability such as "
        f"sm_90 (Hopper) or sm_120 (Blackwell RTX PRO 6000); known: {', '.join(FAMILIES)}"
    )


def arches_of(family: str) -> tuple[str, ...]:
    """The architectures of a GPU family, as FAMILIES lists them."""
    return tuple(arch for arch, of in FAMILIES.items() if of == family)


def family_for_arch(text: str) -> str | None:
    """Why `text`, given where an architecture is wanted, is a family (or a slip for one), and
    which architectures to give instead; None where it names no family."""
    from .suggest import closest

    family = closest(text.strip(), ALL_FAMILIES)
    if family is None:
        return None
    what = (f"{text!r} is a hardware family, not an architecture" if text.strip().lower() == family
            else f"{text!r} is not an architecture, but close to the hardware family {family!r}")
    if family == "cpu":
        return f"{what}; a host without a GPU has no architecture: leave the arch out"
    return f"{what}; give one of its architectures: {', '.join(arches_of(family))}"


def arch_family(text: str) -> str | None:
    """The family of `text` where it is an architecture of a known family (given where a family is
    wanted: `sm_120`), else None."""
    try:
        return FAMILIES.get(normalise_arch(text))
    except SpecdecUsageError:
        return None


def family_of(arch: str) -> str:
    """The family of an arch, or `unknown` for chips this plugin has no matrix for."""
    if arch == "cpu":
        return "cpu"
    return FAMILIES.get(arch, "unknown")


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    arch: str  # "sm_90"
    memory_mib: int = 0
    uuid: str = ""  # "GPU-8f6d...", as CUDA_VISIBLE_DEVICES may name it
    real: bool = True  # a GPU this run was given; False: a simulated slot with no GPU behind it
    mig: bool = False  # in MIG mode: CUDA gives its processes a slice of it, never the whole GPU
    power_limit_w: int = 0  # the enforced power limit (0: unknown), which caps its clocks
    default_power_limit_w: int = 0  # the board's default limit (0: unknown)

    @property
    def family(self) -> str:
        return family_of(self.arch)

    @property
    def capped(self) -> bool:
        """Whether its power limit is below the board's default: its timing figures read slower."""
        return 0 < self.power_limit_w < self.default_power_limit_w

    @property
    def details(self) -> str:
        """`81559 MiB, power limit 700 W (default 700 W)`: what its name may not say, for results."""
        parts = [f"{self.memory_mib} MiB"] if self.memory_mib else []
        if self.power_limit_w:
            parts.append(f"power limit {self.power_limit_w} W"
                         + (f" (default {self.default_power_limit_w} W)" if self.default_power_limit_w else ""))
        return ", ".join(parts)


#: How `Hardware.describe` names a host without a GPU.
NO_GPU = "no GPU"


@dataclass(frozen=True)
class Hardware:
    """What the tests run on. `physical_gpus` stays the real count when an arch is simulated."""

    gpus: tuple[GPU, ...]
    source: str  # "nvml", "nvidia-smi", "simulated" or "none"
    physical_gpus: int = 0
    host_gpus: int = 0  # the host's, CUDA_VISIBLE_DEVICES aside: a run given none may still run on one
    trouble: str = ""  # what the header warns of the GPUs (unread, left out, capped), and the fix
    left_out: tuple[GPU, ...] = ()  # GPUs the run was given but does not use: in MIG mode, another model

    @property
    def left_out_note(self) -> str:
        """Why the run does not use `left_out`, and how to run on them; "" where it uses all."""
        return left_out_note(self.gpus, self.left_out)

    @property
    def none_usable(self) -> bool:
        """Whether the run was given GPUs and left out every one (all in MIG mode): its `no GPU`
        is then no CPU host's, and says why with `left_out_note` (a dry run's simulated one aside)."""
        return self.physical_gpus == 0 and not self.simulated and bool(self.left_out_note)

    def gpu_details(self) -> str:
        """`GPUs 0,1: 81559 MiB, power limit 700 W (default 700 W)`: memory and power of the GPUs
        the run uses, which results.json keeps so that a red on a capped board can be explained."""
        groups: dict[str, list[int]] = {}
        for gpu in self.gpus:
            if gpu.real and gpu.details:
                groups.setdefault(gpu.details, []).append(gpu.index)
        return "; ".join(f"GPU{'s' if len(at) > 1 else ''} {','.join(map(str, at))}: {what}"
                         for what, at in groups.items())

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def name(self) -> str | None:
        """The first GPU's name (`NVIDIA H200`), as `arch` is its arch; None without a GPU."""
        return self.gpus[0].name if self.gpus else None

    @property
    def arch(self) -> str | None:
        return self.gpus[0].arch if self.gpus else None

    @property
    def family(self) -> str:
        """The family of the first GPU (a mixed host is scheduled as its first GPU's family)."""
        return self.gpus[0].family if self.gpus else "cpu"

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"

    @property
    def real_indices(self) -> tuple[int, ...]:
        """The GPUs of the inventory that are GPUs this run was given, simulated arch or not."""
        return tuple(gpu.index for gpu in self.gpus if gpu.real)

    def hides(self, gpus: tuple[int, ...]) -> bool:
        """Whether a server leased `gpus` must see no GPU: on a host with GPUs, a slot that is none
        of this run's GPUs would name, as CUDA_VISIBLE_DEVICES, a GPU another job was given."""
        return max(self.physical_gpus, self.host_gpus) > 0 and not set(gpus) <= set(self.real_indices)

    def placement(self, gpus: tuple[int, ...]) -> str:
        """`GPUs 4,5 (NVIDIA H200)`: where a server leased `gpus` runs, by physical index, as its
        failures and results.json say; "" where it sees no GPU (a CPU host, a hidden slot)."""
        if not gpus or self.physical_gpus == 0 or self.hides(gpus):
            return ""
        mine = [gpu for gpu in self.gpus if gpu.index in gpus]
        names = list(dict.fromkeys(gpu.name for gpu in mine))
        # a capped board is named where its figures are read: they are not the model's
        names += [f"{f'GPU {gpu.index} ' if len(mine) > 1 else ''}power limit {gpu.power_limit_w} W of "
                  f"{gpu.default_power_limit_w} W" for gpu in mine if gpu.capped]
        return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))} ({', '.join(names)})"

    def describe(self) -> str:
        """`NVIDIA H200 (sm_90, hopper) x8`, `2 simulated sm_120 GPUs (blackwell)`, `4 simulated
        GPUs without an arch` (--specdec-gpus alone), or `no GPU`: the phrase skip reasons quote."""
        if not self.gpus:
            return NO_GPU
        if self.simulated:  # every slot is named for the settings, so its name would only repeat them
            plural = "s" if self.count != 1 else ""
            if self.family == "cpu":
                return f"{self.count} simulated GPU{plural} without an arch"
            return f"{self.count} simulated {self.arch} GPU{plural} ({self.family})"
        groups: dict[tuple[str, str, str], int] = {}
        for gpu in self.gpus:
            key = (gpu.name, gpu.arch, gpu.family)
            groups[key] = groups.get(key, 0) + 1
        parts = [f"{name} ({arch}, {family}) x{n}" for (name, arch, family), n in groups.items()]
        return ", ".join(parts)

    @property
    def key(self) -> str:
        """Baseline file key: `cpu`, or GPU name, arch and count (`nvidia-h200-sm_90-x8`)."""
        if not self.gpus or self.family == "cpu":
            return "cpu"
        return hardware_key(self.gpus[0].name, self.arch, self.count, simulated=self.simulated)


def hardware_key(gpu_name: str | None, arch: str | None = None, count: int = 0, *,
                 simulated: bool = False) -> str:
    """`nvidia-h200-sm_90-x8` from ("NVIDIA H200", "sm_90", 8); `cpu` when there is no GPU;
    `simulated-sm_120-x1` for a `--specdec-arch` rehearsal, whose figures are no GPU's.

    The name is slugged (lowercase, runs of other characters -> '-'); the arch keeps its
    underscore because that is how users type it (`--specdec-arch sm_120`).
    """
    if not gpu_name or count <= 0:
        return "cpu"
    parts = ["simulated"] if simulated else [re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "gpu"]
    if arch:
        parts.append(re.sub(r"[^a-z0-9_]+", "-", arch.lower()).strip("-"))
    parts.append(f"x{count}")
    return "-".join(parts)


def _detect_nvml() -> list[GPU] | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):
                name = name.decode()
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            gpus.append(GPU(index, name, f"sm_{major}{minor}", int(memory), uuid, mig=_nvml_mig(pynvml, handle),
                            power_limit_w=_nvml_watts(pynvml, "nvmlDeviceGetEnforcedPowerLimit", handle),
                            default_power_limit_w=_nvml_watts(pynvml, "nvmlDeviceGetPowerManagementDefaultLimit",
                                                              handle)))
        return gpus
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_mig(pynvml, handle) -> bool:
    """Whether MIG mode is on; a GPU without MIG (or an older nvidia-ml-py) answers an error."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except Exception:
        return False
    return current == 1


def _nvml_watts(pynvml, query: str, handle) -> int:
    """A power limit in whole watts (NVML answers milliwatts), or 0 where the board has none."""
    try:
        return round(getattr(pynvml, query)(handle) / 1000)
    except Exception:
        return 0


def _smi_field(fields: list[str], at: int) -> str:
    """An optional field of a query line: "" where absent or `[N/A]`, `[Not Supported]`."""
    value = fields[at] if len(fields) > at else ""
    return "" if value.startswith("[") else value


def _smi_watts(text: str) -> int:
    try:
        return round(float(text))
    except ValueError:
        return 0


#: What nvidia-smi is asked per GPU; the last three (MIG mode, power limits) only where the driver knows them.
SMI_FIELDS = ("index", "name", "compute_cap", "memory.total", "uuid", "mig.mode.current", "enforced.power.limit",
              "power.default_limit")


def _smi_query(exe: str, fields: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=20, check=False)


def _detect_nvidia_smi() -> tuple[list[GPU], str] | None:
    """The GPUs nvidia-smi lists, and what went wrong ("" if nothing): one broken GPU makes it exit
    non-zero while still listing the others, which the run keeps rather than count as no GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = _smi_query(exe, SMI_FIELDS)
        if done.returncode and not (done.stdout or "").strip():
            # an older driver refuses a field it does not know and lists nothing: its GPUs are still GPUs
            done = _smi_query(exe, SMI_FIELDS[:5])
    except (OSError, subprocess.SubprocessError):
        return None
    gpus, unread = [], []
    for line in (done.stdout or "").strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        try:
            gpus.append(GPU(int(fields[0]), fields[1], normalise_arch(fields[2]), int(float(fields[3])),
                            _smi_field(fields, 4), mig=_smi_field(fields, 5) == "Enabled",
                            power_limit_w=_smi_watts(_smi_field(fields, 6)),
                            default_power_limit_w=_smi_watts(_smi_field(fields, 7))))
        except (ValueError, IndexError, SpecdecUsageError):
            unread.append(line.strip())
    trouble = ""
    if done.returncode or unread:
        said = "; ".join(unread + [x.strip() for x in (done.stderr or "").strip().splitlines()])
        what = f"exited with status {done.returncode}" if done.returncode else "printed lines naming no usable GPU"
        kept = (f"; the run uses the {len(gpus)} GPU(s) it could read ({', '.join(str(g.index) for g in gpus)}): "
                f"check the others with nvidia-smi -q" if gpus else "")
        trouble = f"{exe} {what}" + (f" ({said})" if said else "") + kept
    return gpus, trouble


def detect() -> Hardware:
    """The real inventory, as far as CUDA_VISIBLE_DEVICES lets this run see it; a machine where
    neither NVML nor nvidia-smi answers has no GPU."""
    gpus, source, trouble = _detect_nvml(), "nvml", ""
    if not gpus:
        gpus, trouble = _detect_nvidia_smi() or (None, "")
        source = "nvidia-smi"
    if not gpus:
        return Hardware((), "none", physical_gpus=0, trouble=_unseen_gpus(trouble))
    host = len(gpus)
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is not None:
        gpus = visible_to_cuda(gpus, setting)
        # UUIDs say nothing of where the servers run: the indices they name do
        named = f" (GPUs {','.join(str(gpu.index) for gpu in gpus) or 'none'})" if "GPU-" in setting else ""
        source = f"{source}, CUDA_VISIBLE_DEVICES={setting}{named}"
    used, left_out = one_model(gpus)
    capped = [f"GPU {gpu.index} runs at a power limit of {gpu.power_limit_w} W, below its default "
              f"{gpu.default_power_limit_w} W: its timing figures read slower than the model's"
              for gpu in used if gpu.capped]
    trouble = "; ".join(filter(None, [trouble, left_out_note(used, left_out), *capped]))
    return Hardware(tuple(used), source, physical_gpus=len(used), host_gpus=host, trouble=trouble,
                    left_out=tuple(left_out))


def one_model(gpus: list[GPU]) -> tuple[list[GPU], list[GPU]]:
    """The GPUs a run measures on, and those it leaves out: one in MIG mode would run its servers on
    a slice (a fraction of its SMs and memory), and a GPU of another model than the first usable
    one would put figures of two models under one baseline key, and one family's matrix on
    another's chip. Models are told apart by name (`NVIDIA H100 PCIe` is not `NVIDIA H100 80GB HBM3`)."""
    whole = [gpu for gpu in gpus if not gpu.mig]
    model = whole[0].name if whole else None
    return [gpu for gpu in whole if gpu.name == model], [gpu for gpu in gpus if gpu.mig or gpu.name != model]


def left_out_note(used: tuple[GPU, ...] | list[GPU], left_out: tuple[GPU, ...] | list[GPU]) -> str:
    """Why the run does not use `left_out` (`one_model`), and how to run on them."""
    def named(gpus: list[GPU]) -> str:
        names = ", ".join(dict.fromkeys(gpu.name for gpu in gpus))
        return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(str(gpu.index) for gpu in gpus)} ({names})"

    notes = []
    mig = [gpu for gpu in left_out if gpu.mig]
    if mig:
        notes.append(f"{named(mig)} left out, in MIG mode: a server there runs on a slice, whose figures are not "
                     f"the whole GPU's; run on it with MIG off (nvidia-smi -i "
                     f"{','.join(str(gpu.index) for gpu in mig)} -mig 0)")
    other = [gpu for gpu in left_out if not gpu.mig]
    if other and used:
        notes.append(f"{named(other)} left out, another model than {named(list(used))}: one run measures one "
                     f"model, under its baseline key; run on them with CUDA_VISIBLE_DEVICES="
                     f"{','.join(gpu.uuid or str(gpu.index) for gpu in other)}")
    return "; ".join(notes)


def _driver_shows_gpu() -> bool:
    """The NVIDIA driver's per-GPU device files (`/dev/nvidia0`, ...), seen without touching CUDA."""
    return any(os.path.exists(f"/dev/nvidia{i}") for i in range(64))


def _unseen_gpus(smi_trouble: str = "") -> str:
    """Where the driver's device files show a GPU that neither probe could read (nvidia-ml-py not
    installed, nvidia-smi not on PATH or failing): the run would otherwise be a CPU run, its header
    saying only that no GPU was found, and the servers placed by no lease."""
    if not _driver_shows_gpu():
        return ""
    smi = shutil.which("nvidia-smi")
    why = ("nvidia-smi is not on PATH" if smi is None else smi_trouble or f"{smi} failed or listed no GPU")
    return (f"/dev/nvidia* shows a GPU, but nvidia-ml-py could not read it and {why}: install nvidia-ml-py "
            f"(pip install nvidia-ml-py) or put a working nvidia-smi on PATH")


def visible_to_cuda(gpus: list[GPU], setting: str) -> list[GPU]:
    """The GPUs a CUDA_VISIBLE_DEVICES value leaves, read as CUDA reads it: indices (CUDA's order,
    which is NVML's PCI order where CUDA_DEVICE_ORDER=PCI_BUS_ID or the GPUs are alike) or UUIDs
    (a unique prefix will do), the list ending at the first entry that names no GPU (-1 hides all).
    Servers then get physical indices with CUDA_DEVICE_ORDER=PCI_BUS_ID (servers/process.py)."""
    chosen: list[GPU] = []
    for entry in (part.strip() for part in setting.split(",")):
        if entry.startswith("MIG-"):
            raise SpecdecUsageError(f"CUDA_VISIBLE_DEVICES={setting}: {entry} is a MIG instance; servers are "
                                    f"placed on whole GPUs, so name GPUs (indices or GPU- UUIDs)")
        if entry.startswith("GPU-"):
            found = [gpu for gpu in gpus if gpu.uuid and gpu.uuid.startswith(entry)]
            gpu = found[0] if len(found) == 1 else None
        else:
            index = int(entry) if re.fullmatch(r"\d+", entry) else -1
            gpu = gpus[index] if 0 <= index < len(gpus) else None
        if gpu is None:
            break
        if gpu not in chosen:
            chosen.append(gpu)
    return chosen


def resolve(arch: str | None, gpus: int | None, detected: Hardware | None = None,
            gpus_source: str = "--specdec-gpus", arch_source: str = "--specdec-arch") -> Hardware:
    """Apply `--specdec-arch` / `--specdec-gpus` to the detected inventory.

    `arch` pretends every GPU is that arch (one GPU when none exists); `gpus` sets the inventory
    size to schedule on (a simulated inventory on a CPU machine, or fewer than detected).
    `gpus_source` and `arch_source` name where `gpus` and `arch` were set, for their errors.
    """
    real = detected if detected is not None else detect()
    if gpus is not None and gpus < 0:
        raise SpecdecUsageError(f"--specdec-gpus {gpus}: the GPU count must be 0 or more")
    if arch is None and gpus is None:
        return real
    if arch is None:
        if gpus <= real.count:
            return Hardware(real.gpus[:gpus], real.source, real.physical_gpus, real.host_gpus, trouble=real.trouble,
                            left_out=real.left_out)
        if real.count:
            raise SpecdecUsageError(
                f"{gpus_source} {gpus}: only {real.count} GPUs found ({real.describe()}); "
                + (f"{real.left_out_note}; " if real.left_out_note else "")  # the host has more, unused
                + f"ask for at most {real.count}, or add --specdec-arch to simulate an inventory"
            )
        # Slots for scheduling tests on a CPU machine: no arch, so no GPU family's suite runs.
        simulated = tuple(GPU(i, "simulated GPU", "cpu", real=False) for i in range(gpus))
        return Hardware(simulated, "simulated", real.physical_gpus, real.host_gpus, trouble=real.trouble,
                        left_out=real.left_out)
    arch = normalise_arch(arch)
    if arch not in FAMILIES:  # a simulated arch only rehearses a family this plugin knows
        raise SpecdecUsageError(
            f"{arch_source} {arch}: no family known for this architecture, so there is no suite "
            f"to rehearse; use one of {', '.join(FAMILIES)}"
        )
    if gpus == 0:  # an inventory of no GPU has no arch: the family's suite would skip, unrehearsed
        raise SpecdecUsageError(
            f"{gpus_source} 0 leaves no GPU to simulate as {arch} ({arch_source}); give at least 1, "
            f"or leave it out for one simulated GPU (as many as the host has, on a GPU host)")
    count = gpus if gpus is not None else max(real.count, 1)
    name = f"simulated {arch}"
    # the GPUs this run was given keep their indices (and UUIDs, for their claims): leases become
    # the servers' CUDA_VISIBLE_DEVICES
    given = real.gpus[:count]
    after = max((gpu.index for gpu in real.gpus), default=-1) + 1
    slots = [GPU(gpu.index, name, arch, gpu.memory_mib, gpu.uuid) for gpu in given]
    slots += [GPU(i, name, arch, real=False) for i in range(after, after + count - len(given))]
    return Hardware(tuple(slots), "simulated", real.physical_gpus, real.host_gpus, trouble=real.trouble,
                    left_out=real.left_out)
