"""The explorer page in headless Chromium, and the attention heatmap PNG."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from bertfamily.inspect.explore import write_page
from bertfamily.presets import FAMILY, PRESETS

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SMALL_V = 1009


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("explore") / "family.html"
    write_page(path, vocab_size=SMALL_V)
    return path


@pytest.mark.slow
def test_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched
    assert "<style>" in text and "<script>" in text
    assert text.count('<th class="model') == len(FAMILY)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"chromium ({CHROMIUM}) and chromedriver ({DRIVER}) are required in CI; "
                ".ci/run installs them"
            )
        pytest.skip("headless Chromium not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="bertfamily-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1600,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow
def test_explorer_in_headless_chromium(page, browser):
    from selenium.webdriver.common.by import By

    from bertfamily import EncoderConfig
    from bertfamily.inspect.symbols import choose_batch_shape
    from bertfamily.inspect.trace import trace

    browser.get(page.as_uri())
    columns = browser.find_elements(By.CSS_SELECTOR, "#flow th.model")
    assert [c.get_attribute("data-model") for c in columns] == FAMILY
    # A shape read from the rendered page equals the traced one.
    key = "encoder.layers.*.attention:matmul(B,N,T,T)#0"
    cell = browser.find_element(By.CSS_SELECTOR, f'td[data-model="tinybert-4l"][data-key="{key}"]')
    shape = cell.find_element(By.CSS_SELECTOR, ".shape").text
    numbers = cell.find_element(By.CSS_SELECTOR, ".numbers").text

    def small(name):  # as the page does: special ids past the small vocabulary are reset
        c = EncoderConfig.from_preset(name)
        fix = {"pad_token_id": 0, "sep_token_id": None} if c.pad_token_id >= SMALL_V else {}
        return EncoderConfig.from_preset(name, vocab_size=SMALL_V, **fix)

    configs = [small(n) for n in FAMILY if n in PRESETS]
    B, T = choose_batch_shape(configs)
    step = trace(
        EncoderConfig.from_preset("tinybert-4l", vocab_size=SMALL_V), batch=B, seq_len=T
    ).by_key()[key]
    assert shape == step.output_symbols[0] == "(B, N, T, T)"
    assert numbers == str(step.output_shape)
    assert "struct" in cell.get_attribute("class")  # Dh = 26 differs from BERT-base
    missing = browser.find_element(
        By.CSS_SELECTOR, 'td[data-model="distilbert-base"][data-key="encoder.pooler"]'
    )
    assert "absent" in missing.text
    legend = browser.find_element(By.CSS_SELECTOR, ".legend").text
    assert "Dh head dimension" in legend
    assert len(browser.find_elements(By.CSS_SELECTOR, "#comparison tbody tr")) == len(FAMILY)
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "explorer.png"))
    # The model picker hides a column.
    box = browser.find_element(By.CSS_SELECTOR, '.picker input[data-col="c1"]')
    box.click()
    assert not browser.find_element(By.CSS_SELECTOR, 'th.model[data-col="c1"]').is_displayed()
    assert browser.find_element(By.CSS_SELECTOR, 'th.model[data-col="c0"]').is_displayed()


def test_attention_png(minilm_dir, tmp_path):
    import torch
    from PIL import Image

    from bertfamily.inspect.attention_plot import (
        attention_weights,
        figure_pixels,
        pick_head,
        plot_attention,
    )

    tokens, probs = attention_weights("The cat sat on the mat.", minilm_dir, layer=2, head=3)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and probs.shape == (len(tokens),) * 2
    assert abs(float(probs.sum(-1).mean()) - 1.0) < 1e-5
    out = plot_attention(tokens, probs, tmp_path / "att.png", title="layer 2, head 3")
    with Image.open(out) as image:
        assert image.format == "PNG" and image.size == figure_pixels(len(tokens))
    band = torch.softmax(torch.randn(len(tokens), 9), -1)  # windowed attention: a band of 2W+1
    with Image.open(plot_attention(tokens, band, tmp_path / "band.png")) as image:
        assert image.size == figure_pixels(len(tokens))
    fake = tuple(torch.zeros(1, 12, 4, 4) for _ in range(6))
    with pytest.raises(ValueError, match="layer 6 is out of range: the model has 6 layers"):
        pick_head(fake, 6, 0)
    with pytest.raises(ValueError, match="head 12 is out of range"):
        pick_head(fake, -1, 12)


def test_attention_cli(minilm_dir, tmp_path):
    from typer.testing import CliRunner

    from bertfamily.cli import app

    out = tmp_path / "a.png"
    result = CliRunner().invoke(
        app,
        [
            "attention",
            "Hello world",
            "--model",
            str(minilm_dir),
            "--layer",
            "0",
            "--head",
            "1",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000
    result = CliRunner().invoke(
        app, ["attention", "x", "--model", str(minilm_dir), "--output", str(tmp_path / "a.jpg")]
    )
    assert result.exit_code == 2 and ".png" in result.output


def test_attention_band_for_longformer(minilm_dir, tmp_path):
    """Windowed attention: the heatmap shows the band of 2W+1 key offsets around each token."""
    import shutil as sh

    import torch
    import transformers
    from PIL import Image
    from typer.testing import CliRunner

    from bertfamily.cli import app
    from bertfamily.inspect.attention_plot import attention_weights, figure_pixels

    torch.manual_seed(0)
    config = transformers.LongformerConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=66,
        type_vocab_size=1,
        pad_token_id=0,
        attention_window=[4, 6],
    )
    path = tmp_path / "tiny-longformer"
    transformers.LongformerModel(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        sh.copy(minilm_dir / name, path / name)
    text = "The cat sat on the mat."
    tokens, probs = attention_weights(text, path, layer=1, head=2)
    assert probs.shape == (len(tokens), 7)  # W = 3 on each side: 2W + 1 = 7 columns
    assert torch.allclose(probs.sum(-1), torch.ones(len(tokens)), atol=1e-5)
    assert not probs[0, :3].any() and not probs[-1, -3:].any()  # no keys before / after
    out = tmp_path / "band.png"
    result = CliRunner().invoke(
        app, ["attention", text, "--model", str(path), "--layer", "0", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    with Image.open(out) as image:
        assert image.size == figure_pixels(len(tokens))
