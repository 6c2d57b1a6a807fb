"""Screenshots of the denoising-history views for docs/history.md.

    python scripts/screenshot_history.py                  # trains a short sort run first
    python scripts/screenshot_history.py --run runs/sort_mlm/history/val-step0000250 \
        runs/sort_mlm/generate/*_threshold=0.9 --out docs   # after a generate with predictor.threshold=0.9

Without ``--run`` it trains the MLM on the built-in sort task for ``--steps`` optimizer steps
in a temporary folder (validating, with history, halfway and at the end), then generates
``--samples`` test samples with ``predictor.threshold=0.9`` (several tokens per step). It
shows the first validation history (a half-trained model: right and wrong tokens) and the
test generation. With ``--run``, each path (run directory, generation folder or history
folder) stands for its newest history folder; the first is the one pictured.

It writes the TensorBoard views (``xdllm.history.write_tensorboard``, one event folder per
history folder), serves them with TensorBoard, opens each dashboard in headless Chromium
(``/usr/bin/chromium``; ``make browser-deps`` installs it) and saves in ``--out``:

- ``history_denoising.png``: the matplotlib denoising picture of the first sample of the first
  folder, as saved next to its history file;
- ``history_tensorboard_images.png``, ``history_tensorboard_text.png``: the IMAGES and TEXT
  dashboards, filtered to that sample;
- ``history_tensorboard_scalars.png``: the SCALARS dashboard (every folder), unsmoothed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "history"))  # the TensorBoard / Chromium helpers

from history_devtools import CHROMIUM, FIND_ALL, chromium_page, tensorboard_server  # noqa: E402

from xdllm.cli.main import main as xdllm  # noqa: E402
from xdllm.history import load_history, write_tensorboard  # noqa: E402
from xdllm.history.storage import history_folders  # noqa: E402
from xdllm.history.tensorboard import sample_tag  # noqa: E402

IMAGE_LOADED = FIND_ALL + """(() => {
  const card = findAll('tf-image-loader')[0];
  const img = card && card.shadowRoot.querySelector('#main-image-container img');
  return !!(img && img.complete && img.naturalWidth);
})()"""
SHOW_ACTUAL_SIZE = FIND_ALL + "findAll('tf-image-loader').forEach((card) => { card.actualSize = true; })"
TEXT_LOADED = FIND_ALL + """findAll('tf-text-loader').length > 0 && findAll('tf-text-loader').every(
  (card) => (card._texts || []).length > 0)"""
CHARTS_DRAWN = FIND_ALL + """findAll('tf-scalar-card').length > 0 && findAll('tf-scalar-card').every(
  (card) => findAll('path', card).some((p) => (p.getAttribute('class') || '').includes('line')))"""


def train_and_generate(work: Path, steps: int, samples: int) -> list[Path]:
    """A short sort run and a test generation with history; the folders to show."""
    run = work / "run"
    if xdllm(["train", "experiment=sort_mlm", f"run_dir={run}", f"trainer.max_steps={steps}",
              f"trainer.val_check_interval={steps // 2}", "generate_after_train=false",
              "history.num_samples=4", "progress=lines"]) != 0:
        raise SystemExit("training failed")
    generation = run / "generate" / "threshold-0.9"
    if xdllm(["generate", f"ckpt={run}", "history=topk", f"num_samples={samples}", f"batch_size={samples}",
              "predictor.threshold=0.9", f"output_dir={generation}", "history_tensorboard_samples=1"]) != 0:
        raise SystemExit("generation failed")
    return [history_folders(run / "history")[0], generation]


def screenshot_views(folders: list[Path], out: Path, work: Path) -> None:
    logdir = work / "tb"
    shutil.rmtree(logdir, ignore_errors=True)
    for folder in folders:
        label = folder.parent.name if folder.name == "history" else folder.name
        report = write_tensorboard(folder, logdir / label, max_samples=4)
        print(f"rendered {report.written} samples of {folder}")
    pictured = folders[0]
    shutil.copyfile(sorted(pictured.glob("history-*.sample_*.png"))[0], out / "history_denoising.png")
    sample = load_history(sorted(pictured.glob("history-*.pt"))[0]).sample(0)
    focus = "&tagFilter=" + urllib.parse.quote(f"^{sample_tag(sample)}/", safe="")
    with tensorboard_server(logdir) as url, chromium_page(work / "chromium-profile") as page:
        page.navigate(f"{url}/#images{focus}", width=1500, height=900)
        _wait(page, IMAGE_LOADED)
        page.evaluate(SHOW_ACTUAL_SIZE)
        time.sleep(1.0)
        page.screenshot(out / "history_tensorboard_images.png")
        page.navigate(f"{url}/#text{focus}", width=1400, height=1500)
        _wait(page, TEXT_LOADED)
        time.sleep(1.0)
        page.screenshot(out / "history_tensorboard_text.png")
        page.navigate(f"{url}/#scalars", width=1400, height=1250)
        _wait(page, CHARTS_DRAWN)
        # the values as logged: no smoothing, no clipping of "outliers"
        page.evaluate(FIND_ALL + "(() => { const d = findAll('tf-scalar-dashboard')[0]; "
                                 "d._smoothingWeight = 0; d._ignoreYOutliers = false; })()")
        time.sleep(1.0)
        page.screenshot(out / "history_tensorboard_scalars.png")


def _wait(page, script: str) -> None:
    if not page.wait_for(bool, script, seconds=60):
        raise SystemExit(f"the page did not finish loading: {script[-120:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, nargs="+", default=None,
                        help="an existing run directory, generation folder or history folder (its newest "
                             "generation is shown)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the screenshots go")
    parser.add_argument("--steps", type=int, default=300, help="training steps without --run")
    parser.add_argument("--samples", type=int, default=16, help="test samples generated without --run")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"needs {CHROMIUM} (make browser-deps)")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xdllm-screenshots-") as temporary:
        work = Path(temporary)
        if args.run is None:
            folders = train_and_generate(work, args.steps, args.samples)
        else:
            folders = [history_folders(path)[-1] for path in args.run]
        screenshot_views(folders, args.out, work)
    print(f"screenshots of {', '.join(map(str, folders))} written to {args.out}")


if __name__ == "__main__":
    main()
