"""lab run's progress within a step: a line redrawn on a terminal, plain lines when piped."""

from __future__ import annotations

import io
import time

from simpleperf.lab.run.progress import StepProgress, bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_fills_with_the_time_passed():
    assert bar(0, 10, 10) == "[----------]"
    assert bar(5, 10, 10) == "[#####-----]"
    assert bar(25, 10, 10) == "[##########]" and bar(1, 0, 4) == "[----]"


def test_piped_progress_is_a_plain_line_per_phase():
    out = io.StringIO()
    progress = StepProgress(out)
    progress.phase("starting the servers")
    progress.countdown("2 flows running", 0.6)
    time.sleep(0.7)
    progress.say("    tcp (tcp), 9.50 Mbit/s")
    progress.done()
    assert out.getvalue() == ("    .. starting the servers\n    .. 2 flows running for 1 s\n"
                              "    tcp (tcp), 9.50 Mbit/s\n")


def test_a_terminal_gets_one_line_redrawn_and_cleared_before_output():
    out = Terminal()
    progress = StepProgress(out)
    progress.phase("starting the servers")
    progress.countdown("1 flow running", 1.0)
    time.sleep(0.8)
    progress.say("[2/2] case 1: next")
    progress.phase("stopping the servers")
    progress.done()
    text = out.getvalue()
    assert "\n" not in text.replace("[2/2] case 1: next\n", "")  # only the run's own line
    draws = [part for part in text.split("\r\033[K") if part]
    assert draws[0] == "    .. starting the servers"
    bars = [d for d in draws if d.startswith("    .. 1 flow running [")]
    assert len(bars) >= 2 and bars[0] != bars[-1]  # the bar moved
    assert "[2/2] case 1: next\n" in draws and draws[-1] == "    .. stopping the servers"
    assert text.endswith("\r\033[K")  # done() leaves the line empty


def test_flows_that_end_with_their_program_count_down_to_a_bound():
    """A command flow ends when its program does: its 601 s are at most that, not a time
    the step will take."""
    out = io.StringIO()
    progress = StepProgress(out)
    progress.countdown("1 flow running", 601, at_most=True)
    progress.phase("collecting the results")
    progress.done()
    assert out.getvalue() == ("    .. 1 flow running for at most 601 s\n"
                              "    .. collecting the results\n")
    live = Terminal()
    progress = StepProgress(live)
    progress.countdown("1 flow running", 601, at_most=True)
    time.sleep(0.5)
    progress.done()
    assert "of at most 601 s" in live.getvalue()
