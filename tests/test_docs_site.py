"""The built documentation site, opened in a real browser (headless Chromium through Playwright).

Run after the build, as .ci/run does: ``sphinx-build -W -n docs docs/_build/html && python -m pytest -m docs``.
For the index page, the CLI reference, the theory page and one executed notebook it checks the page
title, that the math is rendered (MathJax output present, no raw ``$…$``, ``\\(`` or ``\\[`` left in the
visible text outside code), that every image loaded (no broken figure), and saves a screenshot of each
to ``docs/_build/screenshots/``."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

SITE = Path(__file__).resolve().parents[1] / "docs" / "_build" / "html"
SHOTS = SITE.parent / "screenshots"
PAGES = {  # page: (title fragment, has math, has images)
    "index.html": ("symattn", True, True),
    "reference/cli.html": ("Command line", False, False),
    "theory.html": ("mathematics", True, False),
    "notebooks/01_derive_interactively.html": ("specification to the limit equations", False, True),
}
VISIBLE_TEXT = """() => {
  const body = document.querySelector('article') || document.body;
  const copy = body.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, mjx-container, .highlight').forEach(e => e.remove());
  return copy.innerText;
}"""
BROKEN_IMAGES = "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
RAW_MATH = re.compile(r"\$[^$\s][^$]*\$|\\\(|\\\[|\$\$")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[docs]'")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "no Chromium on PATH (Debian: apt-get install chromium)"
    assert (SITE / "index.html").is_file(), f"no built site at {SITE}: run sphinx-build -W -n docs {SITE}"
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.mark.parametrize("page_path", list(PAGES))
def test_page_renders(browser, page_path):
    title, math, images = PAGES[page_path]
    page = browser.new_page(viewport={"width": 1280, "height": 1600})
    page.goto((SITE / page_path).as_uri())
    page.wait_for_load_state("load")
    if math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20000)
        page.evaluate("() => MathJax.startup.promise")
        assert page.locator("mjx-container").count() > 0, "no rendered equation"
        assert page.locator('[data-mml-node="merror"]').count() == 0, "MathJax could not typeset an equation (bad TeX)"
    assert title.lower() in page.title().lower(), page.title()
    leftover = RAW_MATH.findall(page.evaluate(VISIBLE_TEXT))
    assert not leftover, f"raw TeX in the visible text: {leftover[:5]}"
    broken = page.evaluate(BROKEN_IMAGES)
    assert not broken, f"images that did not load: {broken}"
    if images:
        assert page.evaluate("() => document.images.length") > 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / (page_path.replace("/", "_").replace(".html", ".png"))), full_page=False)
    page.close()
