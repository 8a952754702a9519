"""The page's libraries, vendored from the npm registry (`npm pack NAME@VERSION`, the file
copied from the package's dist/ with its LICENSE beside it): pinned, checked by their
hashes in the tests, served from this package (no CDN, no build at run time)."""

from __future__ import annotations

# file under static/vendor -> (npm package, version, licence, SHA-256 of the file)
VENDORED: dict[str, tuple[str, str, str, str]] = {
    "cytoscape.min.js": ("cytoscape", "3.35.0", "MIT (cytoscape.LICENSE)",
                         "71fa9ebec21a7ca2c40cff6aacc30d1f6464e363662ad4b2c197e1adc770cd94"),
    "uPlot.iife.min.js": ("uplot", "1.6.32", "MIT (uPlot.LICENSE)",
                          "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f"),
    "uPlot.min.css": ("uplot", "1.6.32", "MIT (uPlot.LICENSE)",
                      "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04"),
}
