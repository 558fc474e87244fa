"""Screenshots of the reports at 1280 px, as a laptop shows them (docs/images/*-1280*.png).

    PYTHONPATH=. python bench/screenshots.py                 # build the sample store once, eval, calibrate, shoot
    PYTHONPATH=. python bench/screenshots.py --store /tmp/kb # reuse a store of sample_corpus (with use-m)
    PYTHONPATH=. python bench/screenshots.py --eval DIR --cal DIR  # shoot existing `--out` folders only

What `make demo` runs: `kbtool ingest sample_corpus --add-model use-m`, `kbtool eval
eval_sets/sample.jsonl --modes bm25,dense,dense:use-m,hybrid,contract --out`, `kbtool calibrate
eval_sets/sample.jsonl --out`; then headless chromium, at a 1280 px wide window, takes of each
report.html the first screen (1280 x 900) and the whole page, and prints each page's width and
height (measured in the browser); calibrate's calibration.png is copied beside them. Without a chromium binary it says so and exits 0 (nothing
shot); without a CJK font the Chinese questions show as boxes (Debian: fonts-wqy-microhei).
PNGs are written with 256 colours (Pillow), so each stays small enough to commit.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "screenshots"
WIDTH, SCREEN = 1280, 900
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MEASURE = ("<script>document.body.insertAdjacentHTML('beforeend','<pre id=\"measured\">'+"
           "document.documentElement.scrollWidth+' '+document.documentElement.scrollHeight+'</pre>')</script>")


def chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _browser(binary: str, args: list[str], height: int, target: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", *args,
                               target], capture_output=True, text=True, timeout=300)


def measure(binary: str, page: Path) -> tuple[int, int]:
    """(scrollWidth, scrollHeight) of the page at a 1280 px window."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        out = _browser(binary, ["--dump-dom"], SCREEN, copy.as_uri())
    found = re.search(r'<pre id="measured">(\d+) (\d+)</pre>', out.stdout)
    if not found:
        sys.exit(f"{page}: chromium measured nothing: {out.stderr[-500:]}")
    return int(found.group(1)), int(found.group(2))


def shoot(binary: str, page: Path, png: Path, height: int) -> None:
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "shot.png"
        out = _browser(binary, [f"--screenshot={raw}"], height, page.as_uri())
        if not raw.exists():
            sys.exit(f"{page}: no screenshot: {out.stderr[-500:]}")
        Image.open(raw).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)
    print(f"  {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}: {WIDTH} x {height}, "
          f"{png.stat().st_size / 1024:.0f} KB")


def kbtool(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print("$ kbtool " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "kbtool", *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=OUT / "kb", help="store of sample_corpus (built when missing)")
    ap.add_argument("--eval", type=Path, help="an `eval --out` folder to shoot (default: run eval)")
    ap.add_argument("--cal", type=Path, help="a `calibrate --out` folder to shoot (default: run calibrate)")
    ap.add_argument("--images", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    ap.add_argument("--full-max", type=int, default=8000, help="tallest whole-page shot, px (longer pages: the top)")
    a = ap.parse_args()
    binary = chromium()
    if binary is None:
        print("screenshots skipped: no chromium binary on PATH (Debian: apt-get install chromium)")
        return
    if not subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout.strip():
        print("note: no CJK font (Debian: apt-get install fonts-wqy-microhei): Chinese text shows as boxes")
    if a.eval is None or a.cal is None:
        if not a.store.exists():
            kbtool("ingest", "sample_corpus", "--store", str(a.store), "--add-model", "use-m", "-q")
    if a.eval is None:
        a.eval = OUT / "eval"
        kbtool("eval", "eval_sets/sample.jsonl", "--store", str(a.store), "--modes",
               "bm25,dense,dense:use-m,hybrid,contract", "--out", str(a.eval), "-q")
    if a.cal is None:
        a.cal = OUT / "cal"
        kbtool("calibrate", "eval_sets/sample.jsonl", "--store", str(a.store), "--out", str(a.cal), "-q")
    a.images.mkdir(parents=True, exist_ok=True)
    for name, folder in (("report", a.eval), ("calibration", a.cal)):
        page = folder / "report.html"
        width, height = measure(binary, page)
        print(f"{page}: {width} x {height} px at a {WIDTH} px window"
              + ("" if width <= WIDTH else f" (WIDER than the window by {width - WIDTH} px)"))
        shoot(binary, page, a.images / f"{name}-{WIDTH}.png", SCREEN)
        shoot(binary, page, a.images / f"{name}-{WIDTH}-page.png", min(height, a.full_max))
    shutil.copyfile(a.cal / "calibration.png", a.images / "calibration-tradeoff.png")  # the plot on its own
    print(f"  {a.images / 'calibration-tradeoff.png'}: calibrate's calibration.png")


if __name__ == "__main__":
    main()
