"""Remake the README's pictures of the app: ``python docs/screenshots.py`` (from the repository root).

``notebook.png`` is a notebook cell: ``docs/notebook.ipynb`` run by a Jupyter kernel (nbclient), its set-up and
heatmap cells drawn as a notebook draws them (prompt, code, the cell's HTML output) in the same chromium.

Starts ``streamlit run app/main.py`` on a free local port (the shipped default checkpoint, or ``--checkpoint``),
opens a few views through Playwright with Debian's chromium (``apt-get install chromium``) at the three screen
sizes the app is made for (``SIZES``: a desktop at 1600 x 1000, a laptop at 1280 x 720, a phone at 390 x 844 with
touch) and saves one PNG per view and size into ``docs/images/`` (``app.png``, ``app-laptop.png``,
``app-phone.png``...; palette-reduced with Pillow when one would exceed 250 KB, so the repository stays small).
``--sizes`` picks some of the sizes. Each view is opened from its address, so the pictures show exactly what a
shared link shows: what the first screen holds, without scrolling.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.app_browser import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402
from bench.common import DEFAULT_CHECKPOINT  # noqa: E402

OUT = ROOT / "docs" / "images"
# size name -> (file name suffix, viewport, a phone: touch and a mobile browser's layout)
SIZES = {"desktop": ("", {"width": 1600, "height": 1000}, False),
         "laptop": ("-laptop", {"width": 1280, "height": 720}, False),
         "phone": ("-phone", {"width": 390, "height": 844}, True)}
MAX_BYTES = 250_000
TEXT = "A man in a blue shirt is riding a bike down the street."
SHOTS = {  # file name -> the page's address parameters, and where the first chart goes in the window (None: the
    # first screen as it opens)
    "app.png": ({"text": TEXT, "view": "heatmap", "att": "cross", "layer": "3", "head": "2"}, None),
    "all-heads.png": ({"text": TEXT, "view": "all_heads", "att": "cross", "pick": "3.2"}, "start"),
    "compare.png": ({"text": TEXT, "view": "compare_models", "att": "cross", "layer": "3", "head": "2"}, "end"),
}


CHART = "[data-testid=stPlotlyChart] .main-svg"  # a drawn plotly figure (the first screen's heatmap is an SVG)


def settle(page, timeout_s: float) -> None:
    """Wait until the page has drawn its charts and Streamlit has stopped running the script."""
    page.locator(f"{CHART}, [class*=st-key-attn_picture_] img").first.wait_for(timeout=timeout_s * 1000)  # or a picture
    end = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < end and quiet < 3:  # three quiet half-seconds in a row
        running = page.locator("[data-testid=stStatusWidget]").count() > 0
        quiet = 0 if running else quiet + 1
        time.sleep(0.5)
    time.sleep(1.0)  # plotly's last transitions


def shrink(path: Path) -> None:
    """Palette-reduce a PNG that is over ``MAX_BYTES`` (Pillow, 256 colours)."""
    if path.stat().st_size <= MAX_BYTES:
        return
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE).save(path, optimize=True)


NOTEBOOK = ROOT / "docs" / "notebook.ipynb"
NOTEBOOK_CELLS = (0, 1)  # the code cells pictured: the set-up and the heatmap
CELL = ("<div style='display:flex;gap:10px;margin:14px 0 4px'><div style='color:#303f9f;font:13px monospace;"
        "width:60px;text-align:right;padding-top:8px'>[{n}]:</div><pre style='flex:1;margin:0;background:#f5f5f5;"
        "border:1px solid #e0e0e0;padding:8px;font:13px monospace;white-space:pre-wrap'>{code}</pre></div>"
        "<div style='margin-left:70px'>{out}</div>")


def notebook_picture(browser, path: Path) -> None:
    """Run ``docs/notebook.ipynb`` in a kernel and picture its first cells with their outputs, as a notebook shows
    them."""
    import html

    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
                            ).execute()
    cells = [c for c in nb.cells if c.cell_type == "code"]
    parts = []
    for i in NOTEBOOK_CELLS:
        out = []
        for o in cells[i].outputs:
            if o.output_type == "stream":
                out.append(f"<pre style='font:13px monospace;margin:4px 0'>{html.escape(o.text)}</pre>")
            elif "text/html" in o.get("data", {}):
                out.append(o["data"]["text/html"])
        parts.append(CELL.format(n=cells[i].execution_count, code=html.escape(cells[i].source), out="".join(out)))
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    page.set_content("<body style='font-family:sans-serif;margin:8px 16px'>" + "".join(parts) + "</body>")
    page.screenshot(path=str(path), full_page=True)
    page.close()
    shrink(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT.relative_to(ROOT)),
                   help="opened first (relative to the repository root, as the picker lists it)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", nargs="*", choices=sorted(SHOTS) + ["notebook.png"], help="only these pictures")
    p.add_argument("--sizes", nargs="*", choices=list(SIZES), default=list(SIZES), help="these screen sizes")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each page")
    args = p.parse_args(argv)
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        print(f"{CHROMIUM} not found: apt-get install chromium", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.only or "notebook.png" in args.only:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                notebook_picture(browser, args.out / "notebook.png")
            finally:
                browser.close()
        print(f"notebook.png: {(args.out / 'notebook.png').stat().st_size / 1000:.0f} KB")
        if args.only == ["notebook.png"]:
            return 0
    with streamlit_server(args.checkpoint) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for size in args.sizes:
                suffix, viewport, phone = SIZES[size]
                context = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
                for name, (query, block) in SHOTS.items():
                    if args.only and name not in args.only:
                        continue
                    page = context.new_page()
                    page.goto(f"{url}/?{urlencode(query)}", wait_until="domcontentloaded")
                    settle(page, args.timeout)
                    if block:
                        page.locator(f"{CHART}, [class*=st-key-attn_picture_]").first.evaluate(
                            "(e, block) => e.scrollIntoView({block})", block)
                        time.sleep(0.5)
                    path = args.out / name.replace(".png", f"{suffix}.png")
                    page.screenshot(path=str(path))
                    shrink(path)
                    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                          f"{path.stat().st_size / 1000:.0f} KB")
                    page.close()
                context.close()
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
