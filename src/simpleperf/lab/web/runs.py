"""The past runs the page lists (the results folders `lab run` wrote, as `lab results`
finds them), each with its cases' verdicts against theory and its report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..model.verdicts import case_verdicts
from ..results.errors import ResultsError
from ..results.store import DATABASE, find_runs, load_run, run_state

REPORT = "report.html"
MAX_RUNS = 200  # the newest the page lists


class PastRuns:
    """The runs under one folder; a run is read again only when its database changed.
    Blocks (sqlite): call it off the event loop."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: dict[Path, tuple[float, dict[str, Any]]] = {}

    def listing(self) -> list[dict[str, Any]]:
        """Newest first."""
        try:
            folders = find_runs(self.root)
        except OSError:
            return []
        found = []
        for folder in folders:
            try:
                stamp = (folder / DATABASE).stat().st_mtime
            except OSError:
                continue
            cached = self.seen.get(folder)
            if cached is None or cached[0] != stamp:
                cached = (stamp, _view(folder))
                self.seen[folder] = cached
            found.append(cached[1])
        for gone in set(self.seen) - set(folders):
            del self.seen[gone]
        return sorted(found, key=lambda run: run.get("started") or 0,
                      reverse=True)[:MAX_RUNS]

    def report(self, name: str) -> Path | None:
        """A run's report.html, for a folder name the listing has (never a path the
        request made up), and neither it nor its folder a symbolic link: the console runs
        as root, and a link planted in a shared results folder could name any file."""
        for folder in find_runs(self.root):
            report = folder / REPORT
            if folder.name == name and not folder.is_symlink() and \
                    not report.is_symlink() and report.is_file():
                return report
        return None


def _view(folder: Path) -> dict[str, Any]:
    try:
        run = load_run(folder)
    except ResultsError as error:
        return {"name": folder.name, "error": str(error)}
    flows = [flow for step in run["steps"] for flow in step["flows"]]
    verdicts = case_verdicts(run["steps"])
    return {"name": folder.name, "experiment": run["experiment"], "started": run["started"],
            "quick": bool(run["quick"]), "state": run_state(run), "steps": len(run["steps"]),
            "flows": len(flows), "failed": sum(1 for flow in flows if not flow["ok"]),
            "shaper": run["shaper"], "report": (folder / REPORT).is_file(),
            "verdicts": [{"case": verdict.case, "within": verdict.within,
                          "summary": verdict.summary()} for verdict in verdicts]}
