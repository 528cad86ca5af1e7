"""Telemetry: one conformance suite every sampler passes (SamplerContract), then what only one
backend does. NVML and AMD SMI run against fakes of their Python libraries (tests/fakes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes import (
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    Phase,
    ScriptedTrace,
    install_fake_amdsmi,
    install_fake_pynvml,
)
from fakes.fake_amdsmi import FakeGcd
from fakes.fake_pynvml import FakeGpu

from collectors.spec import TELEMETRY_FIELDS
from collectors.telemetry import (
    AmdSmiSampler,
    CpuSampler,
    NvmlSampler,
    ReplaySampler,
    Sample,
    TelemetryError,
    TelemetrySampler,
    TelemetryUnavailable,
    amdsmi_available,
    nvml_available,
    open_sampler,
    read_trace,
    record_trace,
    write_trace,
)
from collectors.telemetry.cpu import find_rapl_zones, read_proc_stat
from collectors.telemetry.nvml import decode_clock_event_reasons
from collectors.telemetry.summary import (
    DeviceSummary,
    counter_delta_j,
    percentile,
    run_summary,
    time_weighted_mean,
)

WINDOW_S = 0.2
FAST_HZ = 100.0


@dataclass
class Backend:
    """How to open one sampler kind, and what its run summary must say."""

    name: str
    open: Callable[..., TelemetrySampler]
    num_devices: int
    total_power_w: float
    expected: dict[str, float | None]
    """Run-summary values (approximate) or None (the backend cannot measure it)."""
    rel_tol: float = 0.03


def _nvml_backend(monkeypatch: pytest.MonkeyPatch) -> Backend:
    install_fake_pynvml(monkeypatch, [
        FakeGpu(ScriptedTrace.constant(300.0, temp_c=60, mem_temp_c=70, sm_clock_mhz=1980)),
        FakeGpu(ScriptedTrace.constant(500.0, temp_c=65, mem_temp_c=80, sm_clock_mhz=1755,
                                       reasons=SW_POWER_CAP)),
    ])
    return Backend("nvml", NvmlSampler, 2, 800.0, {
        "avg_power_w": 400.0, "peak_power_w": 500.0, "max_temp_c": 65.0,
        "max_mem_temp_c": 80.0, "mean_sm_clock_mhz": 1867.5, "throttle_frac_power": 0.5,
        "throttle_frac_thermal": 0.0})


def _amdsmi_backend(monkeypatch: pytest.MonkeyPatch) -> Backend:
    install_fake_amdsmi(monkeypatch, [
        FakeGcd(ScriptedTrace.constant(600.0, temp_c=80, mem_temp_c=85, sm_clock_mhz=2100,
                                       reasons=SW_THERMAL_SLOWDOWN)),
        FakeGcd(ScriptedTrace.constant(700.0, temp_c=90, mem_temp_c=88, sm_clock_mhz=1900)),
    ])
    return Backend("amdsmi", AmdSmiSampler, 2, 1300.0, {
        "avg_power_w": 650.0, "peak_power_w": 700.0, "max_temp_c": 90.0,
        "max_mem_temp_c": 88.0, "mean_sm_clock_mhz": 2000.0, "throttle_frac_power": 0.0,
        "throttle_frac_thermal": 0.5})


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _rapl_tree(root: Path, zones: dict[str, str], *, max_uj: int = 262_143_328_850) -> Path:
    for zone, name in zones.items():
        (root / zone).mkdir(parents=True)
        (root / zone / "name").write_text(name + "\n")
        (root / zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
        (root / zone / "energy_uj").write_text("1000000\n")
    return root


@pytest.fixture
def live_rapl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake powercap tree whose package counter advances at 50 W, as RAPL's would: like the
    hardware counter, it is current whenever it is read (a thread rewriting the file falls
    behind when the machine is loaded, and the sampler then sees a stale counter)."""
    from collectors.telemetry import cpu

    root = _rapl_tree(tmp_path / "powercap", {"intel-rapl:0": "package-0"})
    start_s, real_read = time.monotonic(), cpu.RaplZone.read_energy_uj

    def read_energy_uj(zone) -> int:
        if Path(zone.path).is_relative_to(root):
            return 1_000_000 + int(50e6 * (time.monotonic() - start_s))
        return real_read(zone)

    monkeypatch.setattr(cpu.RaplZone, "read_energy_uj", read_energy_uj)
    yield root


def _trace_samples(duration_s: float = 1.0, step_s: float = 0.01) -> list[Sample]:
    samples = []
    for i in range(int(duration_s / step_s) + 1):
        t = 100.0 + i * step_s
        for device, power_w in ((0, 250.0), (1, 350.0)):
            samples.append(Sample(device, t, t, power_instant_w=power_w,
                                  energy_j=5000.0 + power_w * i * step_s,
                                  gpu_temp_c=55.0 + 2 * device, mem_temp_c=66.0 + 2 * device,
                                  sm_clock_mhz=1700.0 + 100 * device, throttle_power=False,
                                  throttle_thermal=device == 1))
    return samples


@pytest.fixture(params=["nvml", "amdsmi", "cpu", "replay"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
            tmp_path: Path) -> Backend:
    if request.param == "nvml":
        return _nvml_backend(monkeypatch)
    if request.param == "amdsmi":
        return _amdsmi_backend(monkeypatch)
    if request.param == "cpu":
        root = request.getfixturevalue("live_rapl")
        return Backend("cpu", lambda **kw: CpuSampler(powercap_root=root, **kw), 1, 50.0, {
            "avg_power_w": 50.0, "max_temp_c": None, "max_mem_temp_c": None,
            "mean_sm_clock_mhz": None, "throttle_frac_power": None,
            "throttle_frac_thermal": None}, rel_tol=0.3)
    path = write_trace(tmp_path / "trace.csv", _trace_samples())
    return Backend("replay", lambda **kw: ReplaySampler(path, **kw), 2, 600.0, {
        "avg_power_w": 300.0, "peak_power_w": 350.0, "max_temp_c": 57.0, "max_mem_temp_c": 68.0,
        "mean_sm_clock_mhz": 1750.0, "throttle_frac_power": 0.0, "throttle_frac_thermal": 0.5})


def _starting_now(power_w: float) -> ScriptedTrace:
    return ScriptedTrace([Phase(3600.0, power_w)])


def _window(sampler: TelemetrySampler, key: str = "measure", seconds: float = WINDOW_S):
    sampler.begin_window(key)
    time.sleep(seconds)
    return sampler.end_window(key)


# -- SamplerContract: every backend ----------------------------------------------------------
def test_contract_window_summarises_what_the_backend_reports(backend: Backend) -> None:
    with backend.open(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler)
    run = t.run_summary()
    assert tuple(run) == TELEMETRY_FIELDS
    assert t.key == "measure" and t.backend == backend.name and t.error is None
    assert len(t.per_device) == backend.num_devices
    assert all(d.num_samples >= 8 for d in t.per_device)
    assert all(t.begin_s <= s.read_time_s <= t.end_s for s in t.samples)
    for name, want in backend.expected.items():
        if want is None:
            assert run[name] is None, name
        else:
            assert run[name] == pytest.approx(want, rel=backend.rel_tol, abs=1e-9), name
    assert run["energy_j"] == pytest.approx(backend.total_power_w * t.duration_s,
                                            rel=max(0.1, backend.rel_tol))
    assert run["peak_power_w"] >= 0.7 * run["avg_power_w"]


@pytest.mark.parametrize("rate_hz", [20.0, 100.0])
def test_contract_rate_achieved(backend: Backend, rate_hz: float) -> None:
    with backend.open(rate_hz=rate_hz) as sampler:
        t = _window(sampler, seconds=0.35)
    assert t.telemetry_hz == pytest.approx(rate_hz, rel=0.3)
    assert t.run_summary()["telemetry_hz"] == t.telemetry_hz


def test_contract_windows_nest_and_overlap(backend: Backend) -> None:
    with backend.open(rate_hz=FAST_HZ) as sampler:
        time.sleep(0.03)
        assert sampler.num_buffered_samples == 0  # nothing kept while no window is open
        sampler.begin_window("outer")
        time.sleep(0.1)
        sampler.begin_window("inner")
        time.sleep(0.1)
        outer = sampler.end_window("outer")
        time.sleep(0.1)
        inner = sampler.end_window("inner")
        assert sampler.num_buffered_samples == 0 and sampler.open_windows == []
    assert outer.begin_s < inner.begin_s < outer.end_s < inner.end_s
    assert outer.duration_s == pytest.approx(0.2, abs=0.08)
    assert inner.duration_s == pytest.approx(0.2, abs=0.08)
    assert min(s.read_time_s for s in inner.samples) >= inner.begin_s
    assert {s.read_time_s for s in outer.samples} & {s.read_time_s for s in inner.samples}


def test_contract_window_misuse_is_refused(backend: Backend) -> None:
    with backend.open(rate_hz=FAST_HZ) as sampler:
        sampler.begin_window("a")
        with pytest.raises(TelemetryError, match="'a' is already open"):
            sampler.begin_window("a")
        with pytest.raises(TelemetryError, match="no telemetry window 'b' is open.*'a'"):
            sampler.end_window("b")
        assert sampler.end_window("a").key == "a"


def test_contract_close_is_idempotent_and_final(backend: Backend) -> None:
    sampler = backend.open(rate_hz=FAST_HZ)
    assert sampler.is_running
    sampler.begin_window("left open")
    sampler.close()
    sampler.close()
    assert not sampler.is_running
    with pytest.raises(TelemetryError, match="closed"):
        sampler.begin_window("again")
    with backend.open(rate_hz=FAST_HZ) as managed:
        pass
    assert not managed.is_running


@pytest.mark.parametrize("rate_hz", [0.5, 101.0])
def test_contract_rate_out_of_range(backend: Backend, rate_hz: float) -> None:
    with pytest.raises(ValueError, match="between 1 and 100 Hz"):
        backend.open(rate_hz=rate_hz)


def test_contract_unknown_device_is_refused(backend: Backend) -> None:
    with pytest.raises(TelemetryUnavailable, match="7"):
        backend.open(devices=[7])
    with backend.open(rate_hz=FAST_HZ, devices=[0]) as sampler:
        assert len(_window(sampler, seconds=0.05).per_device) == 1


def test_contract_recorded_trace_replays_alike(backend: Backend, tmp_path: Path) -> None:
    with backend.open(rate_hz=FAST_HZ) as sampler:
        original = record_trace(sampler, tmp_path / "rec.csv", duration_s=WINDOW_S)
    with open_sampler(f"replay:{tmp_path / 'rec.csv'}", rate_hz=FAST_HZ) as replay:
        again = _window(replay)
    first, second = original.run_summary(), again.run_summary()
    assert second["avg_power_w"] == pytest.approx(first["avg_power_w"], rel=0.3)
    assert second["max_temp_c"] == first["max_temp_c"]
    if first["throttle_frac_thermal"] is None:
        assert second["throttle_frac_thermal"] is None
    else:
        assert second["throttle_frac_thermal"] == pytest.approx(first["throttle_frac_thermal"],
                                                                abs=0.15)


# -- NVML -----------------------------------------------------------------------------------
def test_nvml_falls_back_to_power_usage_without_the_instant_field(monkeypatch) -> None:
    nv = install_fake_pynvml(monkeypatch, [
        FakeGpu(ScriptedTrace.constant(300.0)),
        FakeGpu(ScriptedTrace.constant(300.0), unsupported=frozenset({"power_instant"}))])
    with NvmlSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler, seconds=0.05)
    assert sampler.power_source == {0: "NVML_FI_DEV_POWER_INSTANT",
                                    1: "nvmlDeviceGetPowerUsage"}
    assert nv.calls()["nvmlDeviceGetPowerUsage"] >= 2  # GPU 1 only, every poll
    assert t.per_device[1].avg_power_w == pytest.approx(300.0, rel=0.01)


def test_nvml_unsupported_fields_are_none(monkeypatch) -> None:
    nv = install_fake_pynvml(monkeypatch, [FakeGpu(
        ScriptedTrace.constant(400.0),
        unsupported=frozenset({"mem_temp", "energy", "clocks_event_reasons", "utilization"}))])
    with NvmlSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler)
    run, device = t.run_summary(), t.per_device[0]
    assert run["max_mem_temp_c"] is None and run["throttle_frac_power"] is None
    assert run["throttle_frac_thermal"] is None and device.mean_utilisation is None
    assert run["max_temp_c"] == 60.0
    assert device.energy_source == "power"  # no counter: the integral of power instead
    assert run["energy_j"] == pytest.approx(400.0 * t.duration_s, rel=0.1)
    assert nv.calls()["nvmlDeviceGetTotalEnergyConsumption"] == 1  # not asked again


@pytest.mark.parametrize(("mask", "decoded"), [
    (0x0, (False, False, False)), (0x1, (False, False, False)),  # GPU idle is not throttling
    (SW_POWER_CAP, (True, False, False)), (HW_POWER_BRAKE, (True, False, False)),
    (SW_THERMAL_SLOWDOWN, (False, True, False)), (HW_THERMAL_SLOWDOWN, (False, True, False)),
    (HW_SLOWDOWN, (False, False, True)), (0x10 | 0x2 | 0x100, (False, False, False)),
    (SW_POWER_CAP | HW_THERMAL_SLOWDOWN | HW_SLOWDOWN, (True, True, True)),
])
def test_nvml_clock_event_reasons_decoded(mask: int, decoded: tuple[bool, bool, bool]) -> None:
    assert decode_clock_event_reasons(mask) == decoded


@pytest.mark.parametrize("lacking", ["bindings", "driver"])
def test_nvml_falls_back_to_the_throttle_reasons_name(monkeypatch, lacking: str) -> None:
    nv = install_fake_pynvml(monkeypatch, [FakeGpu(ScriptedTrace.constant(
        300.0, reasons=HW_THERMAL_SLOWDOWN))])
    if lacking == "bindings":
        monkeypatch.delattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
    else:
        def missing(handle):
            raise nv.NVMLError(nv.NVML_ERROR_FUNCTION_NOT_FOUND)
        monkeypatch.setattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", missing)
    with NvmlSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler, seconds=0.05)
    assert t.run_summary()["throttle_frac_thermal"] == 1.0
    assert nv.calls()["nvmlDeviceGetCurrentClocksThrottleReasons"] >= 2


def test_nvml_energy_counter_reset_mid_window(monkeypatch) -> None:
    install_fake_pynvml(monkeypatch, [FakeGpu(_starting_now(500.0), energy_reset_at_s=0.12)])
    with NvmlSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler, seconds=0.25)
    energies = [s.energy_j for s in t.samples]
    assert any(b < a for a, b in zip(energies, energies[1:], strict=False))  # it did reset
    assert t.run_summary()["energy_j"] == pytest.approx(500.0 * t.duration_s, rel=0.1)


def test_nvml_keeps_the_library_timestamps(monkeypatch) -> None:
    install_fake_pynvml(monkeypatch, [FakeGpu(ScriptedTrace.constant(300.0), field_lag_s=0.05)])
    with NvmlSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler, seconds=0.05)
    lags = [s.read_time_s - s.timestamp_s for s in t.samples]
    assert all(0.035 < lag < 0.08 for lag in lags), lags


def test_nvml_follows_cuda_visible_devices(monkeypatch) -> None:
    install_fake_pynvml(monkeypatch, [FakeGpu(ScriptedTrace.constant(300.0)),
                                      FakeGpu(ScriptedTrace.constant(500.0))])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with NvmlSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler, seconds=0.05)
    assert sampler.devices == [0]
    assert t.run_summary()["avg_power_w"] == pytest.approx(500.0)


def test_nvml_calls_before_init_fail_like_the_real_library(monkeypatch) -> None:
    nv = install_fake_pynvml(monkeypatch, [FakeGpu(ScriptedTrace.constant(300.0))])
    with pytest.raises(nv.NVMLError) as raised:
        nv.nvmlDeviceGetCount()
    assert raised.value.value == nv.NVML_ERROR_UNINITIALIZED
    assert isinstance(raised.value, nv.NVMLError_Uninitialized)


def test_without_a_driver_auto_falls_back_to_cpu(monkeypatch) -> None:
    install_fake_pynvml(monkeypatch, [], library_found=False)
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # `import amdsmi` raises ImportError
    amdsmi_available.cache_clear()
    ok, reason = nvml_available()
    assert not ok and "NVML did not start" in reason and "Library Not Found" in reason
    with pytest.raises(TelemetryUnavailable, match="use telemetry='amdsmi' or 'cpu'"):
        open_sampler("nvml")
    with open_sampler("auto", rate_hz=FAST_HZ) as sampler:
        assert isinstance(sampler, CpuSampler)


def test_auto_prefers_nvml(monkeypatch) -> None:
    install_fake_pynvml(monkeypatch, [FakeGpu(ScriptedTrace.constant(300.0))])
    with open_sampler(rate_hz=FAST_HZ) as sampler:
        assert isinstance(sampler, NvmlSampler)


def test_nvml_lost_gpu_ends_sampling_with_the_reason(monkeypatch) -> None:
    install_fake_pynvml(monkeypatch, [FakeGpu(_starting_now(300.0), lost_after_s=0.05)])
    with NvmlSampler(rate_hz=FAST_HZ) as sampler, pytest.warns(RuntimeWarning, match="lost"):
        t = _window(sampler, seconds=0.15)
    assert "GPU is lost" in t.error
    assert t.per_device[0].num_samples >= 1  # what was read before still counts


# -- AMD SMI --------------------------------------------------------------------------------
def _mi250(monkeypatch) -> None:
    def gcd(power_w: float, secondary: bool) -> FakeGcd:
        return FakeGcd(ScriptedTrace.constant(power_w, reasons=HW_SLOWDOWN),
                       market_name="AMD Instinct MI250X", power_key="average_socket_power",
                       secondary=secondary, unsupported=frozenset({"violation"}))
    install_fake_amdsmi(monkeypatch, [gcd(500.0, False), gcd(0.0, True), gcd(400.0, False),
                                      gcd(0.0, True)])


def test_mi250_package_power_counts_once_per_package(monkeypatch) -> None:
    _mi250(monkeypatch)
    with AmdSmiSampler(rate_hz=FAST_HZ) as sampler:
        t = _window(sampler)
    run = t.run_summary()
    assert [d.avg_power_w for d in t.per_device] == [pytest.approx(500.0), None,
                                                     pytest.approx(400.0), None]
    assert [d.power_source for d in t.per_device] == ["average", None, "average", None]
    assert run["avg_power_w"] == pytest.approx(225.0)  # per GCD: (500 + 400) / 4
    assert run["peak_power_w"] == pytest.approx(250.0)
    assert run["energy_j"] == pytest.approx(900.0 * t.duration_s, rel=0.1)
    assert t.per_device[1].throttle_frac_hw_slowdown == 1.0  # throttle_status, cause unknown
    assert run["throttle_frac_power"] is None


def test_mi250_one_gcd_gets_half_its_package(monkeypatch) -> None:
    _mi250(monkeypatch)
    with AmdSmiSampler(rate_hz=FAST_HZ, devices=[0]) as sampler:
        t = _window(sampler)
    run = t.run_summary()
    assert run["avg_power_w"] == pytest.approx(250.0)
    assert run["energy_j"] == pytest.approx(250.0 * t.duration_s, rel=0.1)


def test_amdsmi_energy_counter_wraps(monkeypatch) -> None:
    ticks_per_s = 600.0 / 15.259e-6
    nv = install_fake_amdsmi(monkeypatch, [FakeGcd(
        _starting_now(600.0), energy_bits=32,
        energy_start_ticks=2**32 - int(0.1 * ticks_per_s))])
    with AmdSmiSampler(rate_hz=FAST_HZ, energy_counter_bits=32) as sampler:
        t = _window(sampler, seconds=0.25)
    energies = [s.energy_j for s in t.samples]
    assert any(b < a for a, b in zip(energies, energies[1:], strict=False))  # it wrapped
    assert t.run_summary()["energy_j"] == pytest.approx(600.0 * t.duration_s, rel=0.1)
    assert nv.calls()["amdsmi_get_energy_count"] >= 10


def test_amdsmi_missing_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    amdsmi_available.cache_clear()
    ok, reason = amdsmi_available()
    assert not ok and "ROCm" in reason and "pip install amdsmi" in reason
    with pytest.raises(TelemetryUnavailable, match="libamd_smi.so"):
        AmdSmiSampler()


def test_amdsmi_without_rocm_library_is_quiet_and_clear(monkeypatch, capsys) -> None:
    class NoRocm:
        """Like amdsmi without ROCm: prints, then raises OSError on import."""

        def find_spec(self, name, path=None, target=None):
            if name == "amdsmi":
                print("Unable to find amdsmi library try installing amd-smi-lib from your "
                      "package manager")
                raise OSError("libamd_smi.so: cannot open shared object file")
            return None

    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(sys, "meta_path", [NoRocm(), *sys.meta_path])
    with pytest.raises(TelemetryUnavailable, match="OSError: libamd_smi.so"):
        open_sampler("amdsmi")
    assert capsys.readouterr().out == ""


# -- CPU ------------------------------------------------------------------------------------
def test_rapl_package_zones_only(tmp_path: Path) -> None:
    root = _rapl_tree(tmp_path, {"intel-rapl:0": "package-0", "intel-rapl:0:0": "core",
                                 "intel-rapl:1": "package-1", "intel-rapl-mmio:0": "package-0"})
    zones, reason = find_rapl_zones(root)
    assert [z.name for z in zones] == ["package-0", "package-1"]
    assert "package-0, package-1" in reason


def test_unreadable_rapl_leaves_power_none(tmp_path: Path) -> None:
    root = _rapl_tree(tmp_path / "powercap", {"intel-rapl:0": "package-0"})
    (root / "intel-rapl:0" / "energy_uj").unlink()
    (root / "intel-rapl:0" / "energy_uj").mkdir()  # unreadable, even for root
    zones, reason = find_rapl_zones(root)
    assert zones == [] and "not readable" in reason and "intel-rapl:0" in reason
    with CpuSampler(rate_hz=FAST_HZ, powercap_root=root) as sampler:
        run = _window(sampler, seconds=0.05).run_summary()
    assert sampler.devices == [0]
    assert run["avg_power_w"] is None and run["energy_j"] is None


def test_rapl_counter_wrap(tmp_path: Path) -> None:
    max_uj = 10_000_000
    root = _rapl_tree(tmp_path / "powercap", {"intel-rapl:0": "package-0"}, max_uj=max_uj)
    energy = root / "intel-rapl:0" / "energy_uj"
    _write_atomic(energy, f"{max_uj - 1_500_000}\n")
    with CpuSampler(rate_hz=FAST_HZ, powercap_root=root) as sampler:
        sampler.begin_window("wrap")
        time.sleep(0.03)
        _write_atomic(energy, "500000\n")  # 2 J later, past the wrap
        time.sleep(0.03)
        t = sampler.end_window("wrap")
    assert t.run_summary()["energy_j"] == pytest.approx(2.0)


def test_proc_stat_utilisation(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\nintr 1 2\n")
    assert read_proc_stat(stat) == (200, 1000)
    with CpuSampler(rate_hz=FAST_HZ, powercap_root=tmp_path / "none", proc_stat=stat) as sampler:
        time.sleep(0.05)
        _write_atomic(stat, "cpu  160 0 115 720 105 0 0 0 0 0\n")  # 75 of 100 busy
        time.sleep(0.05)
        t = _window(sampler, seconds=0.03)
    assert "no RAPL zones" in sampler.rapl_reason
    assert t.per_device[0].mean_utilisation == pytest.approx(0.75)


# -- replay and traces ----------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_trace_round_trip(tmp_path: Path, suffix: str) -> None:
    samples = [*_trace_samples(0.02), Sample(3, 1.5, 1.6, throttle_hw_slowdown=True,
                                             power_devices=2)]
    assert read_trace(write_trace(tmp_path / f"t{suffix}", samples)) == samples


@pytest.mark.parametrize(("name", "text", "message"), [
    ("a.jsonl", '{"device": 0, "timestamp_s": 1}\n{"device": 0, "watts": 3}\n',
     r"line 2: unknown field\(s\) \['watts'\]; missing \['timestamp_s'\]"),
    ("b.csv", "device,timestamp_s,throttle_power\n0,1.0,maybe\n",
     "line 2: throttle_power='maybe' is not a boolean"),
    ("c.jsonl", '{"device": 0, "timestamp_s": 1}\nnot json\n', "line 2: not JSON"),
    ("d.csv", "device,timestamp_s\n", "has no samples"),
    ("e.txt", "", "must end in .csv or .jsonl"),
])
def test_bad_trace_names_the_problem(tmp_path: Path, name: str, text: str,
                                     message: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(TelemetryError, match=message):
        read_trace(tmp_path / name)


def test_replay_loops_with_a_continuous_energy_counter(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "short.jsonl", _trace_samples(duration_s=0.05))
    with ReplaySampler(path, rate_hz=FAST_HZ) as sampler:
        t = _window(sampler, seconds=0.25)  # five loops of the trace
    energies = [s.energy_j for s in t.samples if s.device == 0]
    assert energies == sorted(energies)
    assert t.run_summary()["energy_j"] == pytest.approx(600.0 * t.duration_s, rel=0.15)


def test_replay_of_missing_trace_is_clear(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="cannot read telemetry trace"):
        open_sampler(f"replay:{tmp_path / 'absent.csv'}")


# -- summaries ------------------------------------------------------------------------------
def test_time_weighted_mean_weights_by_interval() -> None:
    assert time_weighted_mean([0.0, 1.0, 3.0], [100.0, 200.0, 300.0]) == pytest.approx(
        (150 * 1 + 250 * 2) / 3)
    assert time_weighted_mean([2.0, 2.0], [100.0, 300.0]) == 200.0
    with pytest.raises(ValueError, match="as many times as values"):
        time_weighted_mean([0.0], [])


def test_percentile_matches_numpy() -> None:
    np = pytest.importorskip("numpy")
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 50, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


@pytest.mark.parametrize(("previous", "current", "wrap", "delta"), [
    (10.0, 12.5, None, 2.5),
    (95.0, 3.0, 100.0, 8.0),     # wrapped
    (95.0, 3.0, None, 3.0),      # reset (driver reload): energy since the reset
    (20.0, 3.0, 100.0, 3.0),     # a "wrap" of 83 % of the range is a reset
])
def test_counter_delta(previous: float, current: float, wrap: float | None,
                       delta: float) -> None:
    assert counter_delta_j(previous, current, wrap) == pytest.approx(delta)


def test_run_summary_means_over_gpus_and_pools_samples() -> None:
    devices = [DeviceSummary(0, 10, avg_power_w=300.0, peak_power_w=350.0, energy_j=30.0,
                             max_temp_c=60.0, mean_sm_clock_mhz=1800.0,
                             throttle_frac_power=0.0),
               DeviceSummary(1, 30, avg_power_w=500.0, peak_power_w=650.0, energy_j=50.0,
                             max_temp_c=75.0, mean_sm_clock_mhz=1600.0,
                             throttle_frac_power=0.5)]
    run = run_summary(devices, telemetry_hz=19.5)
    assert run == {"avg_power_w": 400.0, "peak_power_w": 650.0, "energy_j": 80.0,
                   "max_temp_c": 75.0, "max_mem_temp_c": None, "mean_sm_clock_mhz": 1650.0,
                   "throttle_frac_power": 0.375, "throttle_frac_thermal": None,
                   "telemetry_hz": 19.5}


# -- open_sampler -------------------------------------------------------------------------
def test_none_sampler_measures_nothing() -> None:
    with open_sampler("none") as sampler:
        t = _window(sampler, seconds=0.01)
    assert t.per_device == [] and set(t.run_summary().values()) == {None}


def test_open_sampler_refuses_unknown_kinds_and_rates() -> None:
    with pytest.raises(ValueError, match="use one of auto, nvml, amdsmi, cpu, none, replay:PATH"):
        open_sampler("dcgm")
    with pytest.raises(ValueError, match="needs a trace path"):
        open_sampler("replay:")
    with pytest.raises(ValueError, match="between 1 and 100 Hz"):
        open_sampler("none", rate_hz=1000)


def test_importing_telemetry_loads_no_vendor_library_or_torch() -> None:
    code = ("import sys, collectors.telemetry; "
            "print(sorted(m for m in ('pynvml', 'amdsmi', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
