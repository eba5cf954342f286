"""Issue 32 item 9: a long wait says what it does on stderr (a spinner on a terminal, one line
elsewhere), and third-party advice (ONNX Runtime's pre-processing warning with a URL) is not
shown."""

from __future__ import annotations

import io
import logging
import time

import pytest
import torch
from rich.console import Console

from bertfamily import notices


@pytest.fixture
def shown(monkeypatch):
    """Waits displayed, as the command line sets them."""
    monkeypatch.setattr(notices, "_display", True)


def test_library_code_only_logs_a_wait(monkeypatch, capsys, caplog):
    monkeypatch.setattr(notices, "_display", False)
    with caplog.at_level(logging.INFO, logger="bertfamily.notices"):
        with notices.waiting("fetching x"):
            pass
    assert capsys.readouterr() == ("", "")
    start, end = [r.getMessage() for r in caplog.records]
    assert start == "fetching x…" and end.startswith("fetching x: done in ")


@pytest.mark.usefixtures("shown")
def test_a_wait_off_a_terminal_says_one_line_when_it_starts_and_one_when_it_ends(capsys):
    with notices.waiting("fetching x (download)"):
        print("work", end="")
    out, err = capsys.readouterr()
    assert out == "work"  # stdout holds nothing of the notice
    start, end = err.splitlines()
    assert start == "fetching x (download)…"
    assert end.startswith("fetching x (download): done in ") and end.endswith(" s")


@pytest.mark.usefixtures("shown")
def test_a_failed_wait_has_no_closing_line(capsys):
    with pytest.raises(RuntimeError), notices.waiting("converting"):
        raise RuntimeError("boom")
    assert capsys.readouterr().err.splitlines() == ["converting…"]


@pytest.mark.usefixtures("shown")
def test_on_a_terminal_a_spinner_with_the_elapsed_time(monkeypatch):
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, soft_wrap=True)
    monkeypatch.setattr(notices, "_console", lambda: console)
    with notices.waiting("int8: measuring"):
        with notices.waiting("fetching janeausten"):  # inside: the outer line shows it
            assert notices._active[-1][0].tasks[0].description == "fetching janeausten…"
        assert notices._active[-1][0].tasks[0].description == "int8: measuring…"
    text = screen.getvalue()
    assert "int8: measuring…" in text and "0:00:0" in text  # the spinner line, elapsed time
    assert "int8: measuring: done in " in text
    assert notices._active == []


@pytest.mark.usefixtures("shown")
def test_a_counted_wait_draws_a_progress_bar_on_a_terminal(monkeypatch):
    """The first use of int8 (the plan's layers, NNCF's tries) counts its steps: a bar."""
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, soft_wrap=True)
    monkeypatch.setattr(notices, "_console", lambda: console)
    with notices.waiting("int8: measuring", total=4) as steps:
        for _ in range(3):
            steps.advance()
        progress = notices._active[-1][0]
        assert progress.tasks[0].completed == 3 and progress.tasks[0].total == 4
        progress.refresh()
        assert "3/4" in screen.getvalue() and "━" in screen.getvalue()  # the bar, M of N
        steps.advance(5)
        assert steps.done == 4  # never past the total
    assert "int8: measuring: done in " in screen.getvalue()


@pytest.mark.usefixtures("shown")
def test_a_counted_wait_off_a_terminal_names_the_step_and_draws_no_bar(monkeypatch, capsys):
    monkeypatch.setattr(notices, "PROGRESS_EVERY_S", 0.05)
    with notices.waiting("int8: measuring", total=10) as steps:
        steps.advance(2)
        time.sleep(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "int8: measuring…" and lines[-1].startswith("int8: measuring: done in")
    assert "int8: measuring… still running, step 2/10, " in lines[1]
    assert not any("━" in line for line in lines)


def test_a_counted_wait_in_library_code_stays_quiet(monkeypatch, capsys, caplog):
    monkeypatch.setattr(notices, "_display", False)
    with caplog.at_level(logging.DEBUG, logger="bertfamily.notices"):
        with notices.waiting("int8: measuring", total=2) as steps:
            steps.advance()
    assert capsys.readouterr() == ("", "")
    assert "int8: measuring: step 1/2" in caplog.text


def test_root_logger_advice_is_dropped_and_other_records_pass(caplog):
    with caplog.at_level(logging.WARNING), notices.silence_root_warnings("Please consider"):
        logging.warning("Please consider to run pre-processing before quantization. See http://x")
        logging.warning("a real problem")
    assert [r.getMessage() for r in caplog.records] == ["a real problem"]


def test_onnx_runtimes_quantiser_advice_is_not_shown(tmp_path, caplog):
    """ONNX Runtime's dynamic quantiser logs its advice (with a URL) on the root logger; the
    int8 export of bertfamily does not pass it on."""
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import bertfamily as bf
    from bertfamily.convert.onnx import export_onnx, quantize_onnx_int8

    torch.manual_seed(0)
    model = bf.build_model(bf.EncoderConfig.from_preset("tiny-bert"))
    export_onnx(model, tmp_path / "fp32.onnx")
    with caplog.at_level(logging.WARNING):
        quantize_dynamic(
            str(tmp_path / "fp32.onnx"), str(tmp_path / "direct.onnx"), weight_type=QuantType.QInt8
        )
    assert any("pre-processing" in r.getMessage() and "http" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        layers = ["encoder.layers.0.ffn.up"]
        quantize_onnx_int8(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", layers)
    assert (tmp_path / "int8.onnx").stat().st_size > 0
    assert not any("pre-processing" in r.getMessage() for r in caplog.records)
