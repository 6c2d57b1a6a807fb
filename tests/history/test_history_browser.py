"""TensorBoard, launched on the written logs and loaded in headless Chromium, shows the views.

Checks both the data API the page uses and the rendered page (text cards and images, found by
walking the dashboards' shadow DOM through the DevTools protocol).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from history_devtools import DevToolsPage, page_websocket_url, wait_for_devtools_port

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, write_tensorboard

CHROMIUM = Path("/usr/bin/chromium")
TENSORBOARD = Path(sys.executable).parent / "tensorboard"
STARTUP_SECONDS = 25

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium "
                       "(apt-get install -y chromium)"),
    pytest.mark.skipif(not TENSORBOARD.exists(), reason=f"no tensorboard program at {TENSORBOARD}"),
]

# Text of every element, shadow roots included, and every image with its decoded size.
COLLECT_PAGE = """(() => {
  const texts = [], images = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) { walk(el.shadowRoot); texts.push(el.shadowRoot.textContent); }
      if (el.tagName === 'IMG' && el.naturalWidth)
        images.push([el.naturalWidth, el.naturalHeight]);
    }
  };
  walk(document);
  const body = document.body ? document.body.innerText : '';
  return {text: texts.join(' ') + ' ' + body, images: images};
})()"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Stop a process started in its own session, with all its children."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


@pytest.fixture
def tensorboard_url(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path / "run" / "history",
                                 tokenizer=SymbolTokenizer(list("abcdefgh")))
    generate(recorder, prompt_lens=[2], gen_len=4, commits_per_step=[1], seed=5)
    write_tensorboard(tmp_path / "run", tmp_path / "tb")
    port = _free_port()
    process = subprocess.Popen(
        [str(TENSORBOARD), "--logdir", str(tmp_path / "tb"), "--host", "127.0.0.1",
         "--port", str(port), "--load_fast=false", "--samples_per_plugin=text=100,images=100"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                if _get_json(f"{url}/data/plugin/text/tags"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"TensorBoard did not serve {url} within {STARTUP_SECONDS} s")
            time.sleep(0.3)
        yield url
    finally:
        _stop(process)


@pytest.fixture
def browser(tmp_path):
    profile = tmp_path / "chromium-profile"
    process = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    page = None
    try:
        port = wait_for_devtools_port(profile, time.monotonic() + STARTUP_SECONDS)
        page = DevToolsPage(page_websocket_url(port))
        yield page
    finally:
        if page is not None:
            page.close()
        _stop(process)
        shutil.rmtree(profile, ignore_errors=True)


def _wait_for(page: DevToolsPage, done, seconds: float = 15.0) -> dict:
    """Poll the page until ``done(state)``; the last state when time runs out."""
    deadline = time.monotonic() + seconds
    state: dict = {"text": "", "images": []}
    while time.monotonic() < deadline:
        try:
            state = page.evaluate(COLLECT_PAGE)
        except RuntimeError:  # the page is between documents while navigating
            pass
        if done(state):
            break
        time.sleep(0.3)
    return state


def test_text_and_images_render_in_tensorboard(tensorboard_url, browser):
    tag = urllib.parse.quote("generation/sample_00000/steps_0-1/text_summary", safe="")
    entries = _get_json(f"{tensorboard_url}/data/plugin/text/text?run=.&tag={tag}")
    assert [e["step"] for e in entries] == [0]
    assert "<strong>step 0</strong> (1 of 4) · 1 committed · 3 masked" in entries[0]["text"]

    browser.call("Page.navigate", url=f"{tensorboard_url}/#text")
    page = _wait_for(browser, lambda s: "3 masked" in s["text"] and "top 1" in s["text"])
    assert "step 0 (1 of 4) · 1 committed · 3 masked" in page["text"]
    assert "top 1" in page["text"]

    browser.call("Page.navigate", url=f"{tensorboard_url}/#images")
    page = _wait_for(browser, lambda s: len(s["images"]) >= 1)
    assert page["images"], page
