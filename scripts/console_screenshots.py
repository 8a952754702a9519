#!/usr/bin/env python3
"""The live console's screenshots in the documentation (docs/images/console-*.png), taken
in Debian's headless Chromium across a real lab (root): the portfolio with a TCP flow
from h1 to h4 under way, the selected link's chart beside it.

    sudo python3 scripts/console_screenshots.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from selenium import webdriver

from simpleperf.lab.model import topology

ROOT = Path(__file__).resolve().parent.parent
SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
IMAGES = ROOT / "docs" / "images"


def lab(*args: str) -> None:
    subprocess.run([*SIMPLEPERF, "lab", *args], check=True, capture_output=True, timeout=180)


def main() -> None:
    lab("up", "portfolio")
    console = subprocess.Popen([*SIMPLEPERF, "lab", "web", "--port", "8391"],
                               stdout=subprocess.PIPE, text=True)
    server = flow = None
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1400,800"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(
        shutil.which("chromedriver") or "chromedriver"))
    try:
        assert console.stdout is not None
        address = re.search(r"http://\S+", console.stdout.readline())
        assert address, "lab web printed no address"
        server = subprocess.Popen(["ip", "netns", "exec", "h4", *SIMPLEPERF, "-s"],
                                  stdout=subprocess.DEVNULL)
        time.sleep(1)
        h4 = str(topology.load("portfolio").address_of("h4"))
        flow = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", h4,
                                 "-t", "30"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        browser.get(address[0])
        time.sleep(4)
        busiest = browser.execute_script(
            "const s = window.simpleperfConsole.series; let best = null, most = -1;"
            "for (const [name, x] of Object.entries(s)) { const v = x.ab[x.ab.length - 1] || 0;"
            " if (v > most) { most = v; best = name; } } return best;")
        browser.execute_script(f"window.simpleperfConsole.select('{busiest}')")
        time.sleep(8)
        IMAGES.mkdir(exist_ok=True)
        browser.save_screenshot(str(IMAGES / "console-portfolio.png"))
        print(f"wrote {IMAGES / 'console-portfolio.png'} (link {busiest} selected)")
    finally:
        browser.quit()
        for process in (flow, server, console):
            if process is not None:
                process.terminate()
                process.wait(20)
        lab("down", "portfolio")


if __name__ == "__main__":
    main()
