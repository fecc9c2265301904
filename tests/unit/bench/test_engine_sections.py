"""The enginecpu and gpu bench sections without a model or a GPU: the gpu section skips with
one line where CTranslate2 sees no CUDA device, the ledger counts each stage's CPU exclusive
of the stages it calls, and both sections render what they measured."""

from __future__ import annotations

import time

import pytest

from bench import enginecpu, gpu


def test_gpu__no_cuda_device_skips_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu, "cuda_devices", lambda: 0)
    found = gpu.measure(quick=True)
    assert found == {"skipped": "no CUDA device visible (CTranslate2 counts none)"}
    assert capsys.readouterr().out.strip().splitlines() == [
        "[bench] gpu: skipped: no CUDA device visible (CTranslate2 counts none)"
    ]
    assert gpu.markdown(found)[-2].startswith("Skipped: no CUDA device visible")


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_ledger__a_stage_counts_its_own_cpu_not_the_stages_it_calls() -> None:
    ledger = enginecpu.Ledger()
    inner = ledger.timed("inner", lambda: busy(0.05))

    def outer_work() -> None:
        busy(0.03)
        inner()

    ledger.timed("outer", outer_work)()
    assert ledger.seconds["inner"] == pytest.approx(0.05, abs=0.02)
    assert ledger.seconds["outer"] == pytest.approx(0.03, abs=0.02)
    assert ledger.calls == {"inner": 1, "outer": 1}


def test_markdown__both_sections_render_their_figures() -> None:
    stages = {"speech detection (VAD)": 3.8, "features (log-mel)": 0.9}
    now = {
        "batch": 8, "audio_seconds": 229.8, "device": "cpu/int8", "threads": 2,
        "cpu_ms_per_audio_s": 109.0, "model_ms_per_audio_s": 102.8,
        "outside_ms_per_audio_s": 6.1, "stages": stages, "profile": [["f", 1.0, 3]],
        "before": {"label": "then", "cpu_ms_per_audio_s": 110.5, "model_ms_per_audio_s": 102.8,
                   "outside_ms_per_audio_s": 7.7, "stages": stages},
    }  # fmt: skip
    text = "\n".join(enginecpu.markdown(now))
    assert "| **outside the model** | 7.7 | 6.1 |" in text
    assert "1.26 times less CPU than before" in text
    assert "the most of what is left: speech detection (VAD) (3.8 ms)" in text
    row = {"processes": 1, "slots": 16, "batch": 16, "audio_per_wall_second": 1142.8,
           "gpu_busy_percent": 23.8, "gpu_memory_gib": 4.08, "cpu_cores_busy": 11.81,
           "wer": 0.0282}  # fmt: skip
    section = {"audio_seconds": 4309.5, "chunks": 150, "shapes": [row],
               "recommended": {"slots": 16, "batch": 16}}  # fmt: skip
    text = "\n".join(gpu.markdown(section))
    assert "| 16 × 16 | 1142.8 | 23.8 | 4.08 | 11.81 | 0.0282 |" in text
    assert "Recommended: slots 16, batchSize 16." in text


def test_before__a_commit_this_checkout_lacks_is_said_not_measured() -> None:
    found = enginecpu.measure_before("0" * 40, repeat=1, batch=1, rounds=1)
    assert found == {
        "error": f"{'0' * 40} is not in this checkout (a git clone with its history has it)"
    }
    now = {
        "batch": 8, "audio_seconds": 229.8, "device": "cpu/int8", "threads": 2,
        "cpu_ms_per_audio_s": 109.0, "model_ms_per_audio_s": 102.8,
        "outside_ms_per_audio_s": 6.1, "stages": {"features (log-mel)": 0.9},
        "profile": [["f", 1.0, 3]], "before": found,
    }  # fmt: skip
    text = "\n".join(enginecpu.markdown(now))
    assert "| **outside the model** | 6.1 |" in text
    assert f'No "before" figures in this run: {"0" * 40} is not in this checkout' in text
