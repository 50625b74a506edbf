"""Hardware detection and overrides, with the inventory injected (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_specdec import hardware
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.hardware import GPU, Hardware

H200x8 = Hardware(tuple(GPU(i, "NVIDIA H200", "sm_90", 143771) for i in range(8)), "nvml", 8)
NONE = Hardware((), "none", 0)


@pytest.mark.parametrize("text, arch", [("sm_120", "sm_120"), ("sm120", "sm_120"),
                                        ("sm_90a", "sm_90"), ("9.0", "sm_90"), ("12.0", "sm_120"),
                                        ("SM_100", "sm_100")])
def test_arch_spellings(text, arch):
    assert hardware.normalise_arch(text) == arch


def test_families():
    assert hardware.family_of("sm_120") == "blackwell"
    assert hardware.family_of("sm_100") == "blackwell"
    assert hardware.family_of("sm_90") == "hopper"
    assert hardware.family_of("sm_89") == "ada"
    assert hardware.family_of("sm_86") == "ampere"
    assert hardware.family_of("sm_70") == "unknown"


def test_describe_and_key():
    assert H200x8.describe() == "NVIDIA H200 (sm_90, hopper) x8"
    assert H200x8.key == "nvidia-h200-sm_90-x8"
    assert NONE.describe() == "no GPU" and NONE.key == "cpu" and NONE.family == "cpu"


def test_a_simulated_inventory_is_said_in_plain_words_once():
    """--specdec-gpus=2 alone on a CPU host read `simulated GPU (cpu, cpu) x2 [simulated]` in the
    header and in skip reasons: "simulated" twice and a CPU called the GPUs' arch."""
    assert hardware.resolve(None, 2, NONE).describe() == "2 simulated GPUs without an arch"
    assert hardware.resolve(None, 1, NONE).describe() == "1 simulated GPU without an arch"
    assert hardware.resolve("sm_120", None, NONE).describe() == "1 simulated sm_120 GPU (blackwell)"
    assert hardware.resolve("sm_90", 3, H200x8).describe() == "3 simulated sm_90 GPUs (hopper)"


def test_the_fixture_fields_the_readme_names():
    # the README's specdec_hardware: name, arch, family, count
    assert (H200x8.name, H200x8.arch, H200x8.family, H200x8.count) == \
        ("NVIDIA H200", "sm_90", "hopper", 8)
    assert (NONE.name, NONE.arch, NONE.family, NONE.count) == (None, None, "cpu", 0)


@pytest.mark.parametrize(
    "name, arch, count, key",
    [
        ("NVIDIA H200", "sm_90", 8, "nvidia-h200-sm_90-x8"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm_120", 1,
         "nvidia-rtx-pro-6000-blackwell-server-edition-sm_120-x1"),
        ("NVIDIA H100 80GB HBM3", "SM_90", 4, "nvidia-h100-80gb-hbm3-sm_90-x4"),
        ("NVIDIA B200", None, 2, "nvidia-b200-x2"),
        (None, None, 0, "cpu"),
        ("NVIDIA H200", "sm_90", 0, "cpu"),
        ("", "sm_90", 1, "cpu"),
    ],
)
def test_hardware_key(name, arch, count, key):
    assert hardware.hardware_key(name, arch, count) == key


def test_a_simulated_inventory_has_its_own_key():
    """A rehearsal's figures are no GPU's: its baseline file never mixes with a real one."""
    assert hardware.resolve("sm_120", None, NONE).key == "simulated-sm_120-x1"
    assert hardware.resolve("sm_90", 2, H200x8).key == "simulated-sm_90-x2"
    assert hardware.resolve(None, 2, NONE).key == "cpu"  # scheduling slots only: no family


def test_arch_override_simulates_that_family():
    hw = hardware.resolve("sm_120", None, NONE)
    assert hw.family == "blackwell" and hw.count == 1 and hw.simulated and hw.physical_gpus == 0
    assert hardware.resolve("sm_120", 4, H200x8).count == 4


@pytest.mark.parametrize("detected", [NONE, H200x8])
def test_arch_with_no_gpus_is_a_usage_error(detected):
    """The arch vanished: the header said no GPU and the family's suite skipped, unrehearsed."""
    with pytest.raises(SpecdecUsageError, match=r"^ini specdec_gpus 0 leaves no GPU to simulate as sm_120 "
                                                r"\(--specdec-arch\); give at least 1"):
        hardware.resolve("sm_120", 0, detected, "ini specdec_gpus")
    # the arch named where it was set too, not as a flag the user never typed
    with pytest.raises(SpecdecUsageError, match=r"as sm_120 \(pyproject.toml \[tool.specdec\] key 'arch'\); give at least 1"):
        hardware.resolve("sm_120", 0, detected, "ini specdec_gpus", "pyproject.toml [tool.specdec] key 'arch'")


def test_gpus_limits_a_real_inventory_and_cannot_exceed_it():
    assert hardware.resolve(None, 2, H200x8).count == 2
    assert hardware.resolve(None, 2, H200x8).family == "hopper"
    with pytest.raises(SpecdecUsageError, match="--specdec-gpus 9: only 8 GPUs found"):
        hardware.resolve(None, 9, H200x8)
    # named where it was set: the ini's twin read as a flag the user never typed
    with pytest.raises(SpecdecUsageError, match="^ini specdec_gpus 9: only 8 GPUs found"):
        hardware.resolve(None, 9, H200x8, "ini specdec_gpus")


def test_gpus_on_a_cpu_machine_simulates_slots_without_a_family():
    hw = hardware.resolve(None, 8, NONE)
    assert hw.count == 8 and hw.family == "cpu" and hw.key == "cpu"


def only_nvidia_smi(monkeypatch, stdout: str, returncode: int = 0) -> SimpleNamespace:
    """A host where NVML finds nothing and nvidia-smi prints `stdout`, exiting with `returncode`;
    the run's result, which a test may change for the next call."""
    done = SimpleNamespace(stdout=stdout, stderr="", returncode=returncode)
    monkeypatch.setattr(hardware.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(hardware.subprocess, "run", lambda *a, **k: done)
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return done


def test_nvidia_smi_output_is_parsed(monkeypatch):
    only_nvidia_smi(monkeypatch, "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887\n"
                                 "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887\n")
    hw = hardware.detect()
    assert hw.source == "nvidia-smi" and hw.count == 2 and hw.arch == "sm_120"
    assert hw.describe() == "NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120, blackwell) x2"


def test_one_broken_gpu_keeps_the_ones_nvidia_smi_could_read_and_names_it(monkeypatch):
    """nvidia-smi exits non-zero when one GPU is broken, still listing the others: the run counted
    the host as having no GPU at all, and said nothing of which GPU failed."""
    done = only_nvidia_smi(monkeypatch, "0, NVIDIA H200, 9.0, 143771, GPU-0a\n"
                                        "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error\n"
                                        "2, NVIDIA H200, 9.0, 143771, GPU-2a\n", returncode=15)
    hw = hardware.detect()
    assert [gpu.index for gpu in hw.gpus] == [0, 2] and hw.source == "nvidia-smi"
    assert hw.trouble == ("/usr/bin/nvidia-smi exited with status 15 (Unable to determine the device handle for GPU "
                          "0000:3B:00.0: Unknown Error); the run uses the 2 GPU(s) it could read (0, 2): check "
                          "the others with nvidia-smi -q")
    assert hardware.resolve(None, 1, hw).trouble == hw.trouble  # --specdec-gpus keeps what the header says
    done.stdout, done.stderr = "", "Failed to initialize NVML: Driver/library version mismatch\n"
    monkeypatch.setattr(hardware, "_driver_shows_gpu", lambda: True)
    assert hardware.detect().trouble.startswith(
        "/dev/nvidia* shows a GPU, but nvidia-ml-py could not read it and /usr/bin/nvidia-smi exited with status "
        "15 (Failed to initialize NVML: Driver/library version mismatch): install")


EIGHT = [GPU(i, "NVIDIA H200", "sm_90", 143771, f"GPU-{i}a{i}b-uuid") for i in range(8)]


@pytest.mark.parametrize("setting, indices", [
    ("4,5,6,7", [4, 5, 6, 7]),  # a Slurm allocation of the host's second half
    (" 6 , GPU-1a1b ", [6, 1]),  # CUDA's order is the listed one; a UUID prefix names a GPU
    ("0,2,-1,3", [0, 2]),  # the list ends at the first entry that names no GPU
    ("3,9,4", [3]),
    ("", []),
    ("-1", []),
])
def test_cuda_visible_devices_limits_the_inventory(monkeypatch, setting, indices):
    """NVML sees every GPU of the host: a run given GPUs 4-7 leased 0-3, another job's, and set
    them as its servers' CUDA_VISIBLE_DEVICES."""
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: list(EIGHT))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    hw = hardware.detect()
    assert [gpu.index for gpu in hw.gpus] == indices and hw.physical_gpus == len(indices)
    assert hw.host_gpus == 8  # a dry run's slots beyond the run's GPUs would name the others
    assert hw.source == f"nvml, CUDA_VISIBLE_DEVICES={setting}" + (" (GPUs 6,1)" if "GPU-" in setting else "")
    assert hw.key == (f"nvidia-h200-sm_90-x{len(indices)}" if indices else "cpu")


def test_where_a_server_runs_is_named_by_index_and_name(monkeypatch):
    """A server's GPUs were written only in its log and the lease history, and a run given GPUs by
    UUID never said which indices those were: a user could not tell where dflash-tp4 ran."""
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: list(EIGHT))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-4a4b,GPU-5a5b,GPU-6a6b,GPU-7a7b")
    hw = hardware.detect()
    assert hw.source == "nvml, CUDA_VISIBLE_DEVICES=GPU-4a4b,GPU-5a5b,GPU-6a6b,GPU-7a7b (GPUs 4,5,6,7)"
    assert hw.placement((4, 5, 6, 7)) == "GPUs 4,5,6,7 (NVIDIA H200)" and hw.placement((5,)) == "GPU 5 (NVIDIA H200)"
    assert hw.placement((0,)) == ""  # another job's GPU: the server sees none
    assert hardware.resolve(None, 2, NONE).placement((0, 1)) == ""  # simulated slots on a CPU host


def test_a_mig_instance_in_cuda_visible_devices_is_named(monkeypatch):
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: list(EIGHT))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    with pytest.raises(SpecdecUsageError, match=r"CUDA_VISIBLE_DEVICES=MIG-1234: MIG-1234 is a MIG instance"):
        hardware.detect()


def test_no_probe_answers_means_cpu_only(monkeypatch):
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: None)
    monkeypatch.setattr(hardware, "_detect_nvidia_smi", lambda: None)
    assert hardware.detect() == Hardware((), "none", 0)


def test_a_simulated_arch_must_have_a_family():
    """A rehearsal of an arch without a family runs no suite and writes a baseline of nothing."""
    with pytest.raises(SpecdecUsageError, match=r"--specdec-arch sm_999: no family known.*"
                                                r"use one of sm_80, .*sm_120, sm_121$"):
        hardware.resolve("sm_999", None, NONE)
    assert hardware.normalise_arch("sm_70") == "sm_70"  # detection still names an unknown chip


def test_a_simulated_arch_keeps_the_gpus_this_run_was_given():
    """A rehearsal on a host whose CUDA_VISIBLE_DEVICES gives the run GPUs 4-7 schedules on 4-7:
    its simulated GPUs were numbered 0-3, so its servers' CUDA_VISIBLE_DEVICES named another
    job's GPUs."""
    given = Hardware(tuple(EIGHT[4:]), "nvml, CUDA_VISIBLE_DEVICES=4,5,6,7", 4)
    assert [gpu.index for gpu in hardware.resolve("sm_120", None, given).gpus] == [4, 5, 6, 7]
    assert [gpu.index for gpu in hardware.resolve("sm_120", 2, given).gpus] == [4, 5]
    assert [gpu.index for gpu in hardware.resolve("sm_120", 3, NONE).gpus] == [0, 1, 2]


def test_a_simulated_arch_keeps_the_gpus_it_is_laid_over_and_hides_the_slots_beyond():
    """A dry run's slots on the run's GPUs stay those GPUs (UUIDs kept, for their claims); a slot
    beyond names a GPU the run was not given (here 2, another job's) or none, so on a host with
    GPUs its server must see none. On a CPU machine nothing is there: the lease numbers pass."""
    given = Hardware(tuple(EIGHT[:2]), "nvml, CUDA_VISIBLE_DEVICES=0,1", 2, 8)
    dry = hardware.resolve("sm_120", 3, given)
    assert [(gpu.index, gpu.uuid, gpu.real) for gpu in dry.gpus] == [
        (0, EIGHT[0].uuid, True), (1, EIGHT[1].uuid, True), (2, "", False)]
    assert dry.real_indices == (0, 1) and dry.host_gpus == 8
    assert not dry.hides((0, 1)) and dry.hides((2,)) and dry.hides((1, 2))
    hidden_all = hardware.resolve("sm_120", 1, Hardware((), "nvml, CUDA_VISIBLE_DEVICES=-1", 0, 8))
    assert hidden_all.real_indices == () and hidden_all.hides((0,))  # GPU 0 is the host's, not the run's
    cpu = hardware.resolve("sm_120", 2, NONE)
    assert cpu.real_indices == () and not cpu.hides((0, 1))
    assert hardware.resolve(None, 2, NONE).real_indices == ()
    assert hardware.resolve(None, 1, H200x8).real_indices == (0,) and not H200x8.hides((7,))


def test_a_gpu_the_probes_cannot_read_is_named_with_the_fix(monkeypatch):
    """A container with the driver's devices but neither nvidia-ml-py nor nvidia-smi ran as a CPU
    host, its header saying only that no GPU was found: it now says why, and what to install."""
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: None)
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)
    monkeypatch.setattr(hardware, "_driver_shows_gpu", lambda: True)
    hw = hardware.detect()
    assert hw.count == 0 and hw.source == "none"
    assert hw.trouble == ("/dev/nvidia* shows a GPU, but nvidia-ml-py could not read it and nvidia-smi is not on "
                          "PATH: install nvidia-ml-py (pip install nvidia-ml-py) or put a working nvidia-smi on PATH")
    monkeypatch.setattr(hardware.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(hardware.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(
        hardware.subprocess.CalledProcessError(15, "nvidia-smi")))
    assert "/usr/bin/nvidia-smi failed or listed no GPU: install" in hardware.detect().trouble
    monkeypatch.setattr(hardware, "_driver_shows_gpu", lambda: False)  # a CPU host: nothing to say
    assert hardware.detect() == Hardware((), "none", 0)


H100 = [GPU(i, "NVIDIA H100 80GB HBM3", "sm_90", 81559, f"GPU-{i}h{i}h") for i in range(2)]
RTX = [GPU(i, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm_120", 97887, f"GPU-{i}r{i}r") for i in (2, 3)]


@pytest.mark.parametrize("setting, used, key", [
    (None, [0, 1], "nvidia-h100-80gb-hbm3-sm_90-x2"),
    ("2,3", [2, 3], "nvidia-rtx-pro-6000-blackwell-server-edition-sm_120-x2"),  # the second model alone
    ("3,0,1", [3], "nvidia-rtx-pro-6000-blackwell-server-edition-sm_120-x1"),  # the first GPU named is its model
])
def test_a_mixed_host_runs_on_one_model_and_says_which_it_left_out(monkeypatch, setting, used, key):
    """2 x H100 + 2 x RTX PRO 6000 was keyed `nvidia-h100-80gb-hbm3-sm_90-x4`: the RTX PRO's
    figures gated against, and saved as, four H100s', and a hopper configuration leased an RTX."""
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: H100 + RTX)
    if setting is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    hw = hardware.detect()
    assert [gpu.index for gpu in hw.gpus] == used and hw.physical_gpus == len(used) and hw.key == key
    assert hw.host_gpus == 4 and not ({gpu.index for gpu in hw.left_out} & set(used))
    if setting is None:
        assert hw.trouble == hw.left_out_note == (
            "GPUs 2,3 (NVIDIA RTX PRO 6000 Blackwell Server Edition) left out, another model than GPUs 0,1 (NVIDIA "
            "H100 80GB HBM3): one run measures one model, under its baseline key; run on them with "
            "CUDA_VISIBLE_DEVICES=GPU-2r2r,GPU-3r3r")
    assert hardware.resolve(None, 1, hw).left_out == hw.left_out  # --specdec-gpus keeps what was left out


def test_asking_for_more_gpus_than_the_run_keeps_names_those_it_left_out(monkeypatch):
    """`--specdec-gpus 3` on 2 x H100 + 2 x RTX PRO 6000 said `only 2 GPUs found`, silent on the
    host's other two and how to run on them."""
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: H100 + RTX)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    hw = hardware.detect()
    with pytest.raises(SpecdecUsageError) as error:
        hardware.resolve(None, 3, hw)
    assert str(error.value) == (
        f"--specdec-gpus 3: only 2 GPUs found ({hw.describe()}); {hw.left_out_note}; ask for at most 2, "
        f"or add --specdec-arch to simulate an inventory")
    assert "\n" not in str(error.value) and "GPUs 2,3 (NVIDIA RTX PRO 6000" in str(error.value)


def test_models_are_told_apart_by_name_not_arch(monkeypatch):
    """H100 PCIe and H100 SXM share sm_90 but not their figures."""
    pcie = GPU(1, "NVIDIA H100 PCIe", "sm_90", 81559, "GPU-pcie")
    monkeypatch.setattr(hardware, "_detect_nvml", lambda: [H100[0], pcie])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    hw = hardware.detect()
    assert hw.key == "nvidia-h100-80gb-hbm3-sm_90-x1" and hw.left_out == (pcie,)


def fake_pynvml(monkeypatch, boards: list[dict]) -> None:
    """nvidia-ml-py answering for `boards`; a board without `mig` has no MIG (NVML: Not Supported)."""
    def field(key):
        def get(handle):
            if key not in handle:
                raise RuntimeError("Not Supported")
            return handle[key]
        return get

    module = SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: len(boards),
        nvmlDeviceGetHandleByIndex=lambda i: boards[i], nvmlDeviceGetName=field("name"),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0), nvmlDeviceGetUUID=field("uuid"),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=81559 * 1024 * 1024),
        nvmlDeviceGetMigMode=lambda h: (field("mig")(h), field("mig")(h)),
        nvmlDeviceGetEnforcedPowerLimit=field("limit_mw"), nvmlDeviceGetPowerManagementDefaultLimit=field("default_mw"))
    monkeypatch.setitem(__import__("sys").modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_a_gpu_in_mig_mode_is_left_out_not_keyed_as_the_whole_gpu(monkeypatch):
    """NVML lists a MIG-mode GPU as its parent: a run keyed it `nvidia-h100-...-x2` and its servers
    ran on a slice (a fraction of the SMs and memory), gated against the whole GPU's figures."""
    fake_pynvml(monkeypatch, [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-a", "mig": 0},
                              {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-b", "mig": 1}])
    hw = hardware.detect()
    assert hw.source == "nvml" and [gpu.index for gpu in hw.gpus] == [0] and hw.key == "nvidia-h100-80gb-hbm3-sm_90-x1"
    assert hw.trouble == ("GPU 1 (NVIDIA H100 80GB HBM3) left out, in MIG mode: a server there runs on a slice, "
                          "whose figures are not the whole GPU's; run on it with MIG off (nvidia-smi -i 1 -mig 0)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the slice's GPU alone: no GPU to measure on
    alone = hardware.detect()
    assert alone.count == 0 and alone.key == "cpu" and alone.host_gpus == 2 and "in MIG mode" in alone.trouble


def test_nvidia_smi_reads_mig_mode_and_power_limits(monkeypatch):
    only_nvidia_smi(monkeypatch, "0, NVIDIA H200, 9.0, 143771, GPU-0a, Disabled, 350.00, 700.00\n"
                                 "1, NVIDIA H200, 9.0, 143771, GPU-1a, Enabled, 700.00, 700.00\n"
                                 "2, NVIDIA H200, 9.0, 143771, GPU-2a, [N/A], [N/A], [N/A]\n")
    hw = hardware.detect()
    assert [(g.index, g.power_limit_w, g.default_power_limit_w) for g in hw.gpus] == [(0, 350, 700), (2, 0, 0)]
    assert [g.index for g in hw.left_out] == [1] and hw.key == "nvidia-h200-sm_90-x2"


def test_a_power_cap_is_recorded_where_the_figures_are_read(monkeypatch):
    """A board capped at half its default power reads slow: nothing in the header, the journal or
    results.json said so, so a red on it could not be told from a regression."""
    fake_pynvml(monkeypatch, [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-a", "limit_mw": 350000,
                               "default_mw": 700000},
                              {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-b", "limit_mw": 700000,
                               "default_mw": 700000}])
    hw = hardware.detect()
    assert hw.key == "nvidia-h100-80gb-hbm3-sm_90-x2"  # the key stays the model's
    assert hw.trouble == ("GPU 0 runs at a power limit of 350 W, below its default 700 W: its timing figures read "
                          "slower than the model's")
    assert hw.placement((0,)) == "GPU 0 (NVIDIA H100 80GB HBM3, power limit 350 W of 700 W)"
    assert hw.placement((0, 1)) == "GPUs 0,1 (NVIDIA H100 80GB HBM3, GPU 0 power limit 350 W of 700 W)"
    assert hw.placement((1,)) == "GPU 1 (NVIDIA H100 80GB HBM3)"
    assert hw.gpu_details() == ("GPU 0: 81559 MiB, power limit 350 W (default 700 W); "
                                "GPU 1: 81559 MiB, power limit 700 W (default 700 W)")
    assert NONE.gpu_details() == "" and hardware.resolve(None, 2, NONE).gpu_details() == ""


def test_an_older_nvidia_smi_that_refuses_a_new_field_still_lists_its_gpus(monkeypatch):
    """A driver older than MIG refuses `mig.mode.current` and lists nothing, exiting non-zero: the
    run lost every GPU and measured as a CPU host. It asks again with the fields the driver knows."""
    asked = []

    def run(command, **kwargs):
        asked.append(command[1])
        if "mig.mode.current" in command[1]:
            return SimpleNamespace(stdout="", returncode=2,
                                   stderr='Field "mig.mode.current" is not a valid field to query.\n')
        return SimpleNamespace(stdout="0, NVIDIA A100-SXM4-80GB, 8.0, 81920, GPU-a\n", stderr="", returncode=0)

    only_nvidia_smi(monkeypatch, "")
    monkeypatch.setattr(hardware.subprocess, "run", run)
    hw = hardware.detect()
    assert hw.key == "nvidia-a100-sxm4-80gb-sm_80-x1" and hw.source == "nvidia-smi" and hw.trouble == ""
    assert asked == ["--query-gpu=" + ",".join(hardware.SMI_FIELDS),
                     "--query-gpu=index,name,compute_cap,memory.total,uuid"]
