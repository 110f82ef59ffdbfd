"""`train --time-limit`: the duration a user writes, and the prediction that decides where a run stops."""

import pytest

from metadisco.core.errors import ConfigError
from metadisco.time_limit import HEADROOM, TimeLimit, format_duration, parse_duration

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("text, seconds", [("600", 600), ("90.5", 90.5), ("600s", 600), ("9m", 540),
                                           ("1h30m", 5400), ("2.5h", 9000), ("1d", 86400), ("10:00", 600),
                                           ("01:30:00", 5400), ("1-00:00:01", 86401), (" 9M ", 540)])
def test_durations_as_users_and_slurm_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "ten minutes", "5x", "1h30", "m", "1:2:3:4"])
def test_a_bad_duration_says_what_to_write(text):
    with pytest.raises(ConfigError, match=r"e\.g\. 600 \(seconds\), 9m, 1h30m"):
        parse_duration(text)


def test_format_duration():
    assert [format_duration(s) for s in (42, 540, 7500)] == ["42 s", "9 min 00 s", "2 h 05 min"]


def test_the_prediction_uses_the_slowest_recent_generation_and_the_measured_comparison():
    now = [0.0]
    limit = TimeLimit(100.0, clock=lambda: now[0])
    assert limit.predicted(True) is None and limit.fits(True)  # nothing measured: the first generation runs
    limit.record_generation(30.0)  # the first in this process: compilation included
    assert limit.predicted(False) == pytest.approx(HEADROOM * 30.0)
    limit.record_generation(2.0)
    limit.record_generation(3.0)
    limit.record_save(1.0)
    assert limit.predicted(False) == pytest.approx(HEADROOM * 3.0 + 1.0)  # compilation no longer counted
    # an unmeasured comparison on fresh seeds is predicted by the first (compiling) generation ...
    assert limit.predicted(True) == pytest.approx(HEADROOM * (3.0 + 30.0) + 1.0)
    limit.record_evaluation(10.0)  # ... and by itself once measured
    assert limit.predicted(True) == pytest.approx(HEADROOM * (3.0 + 10.0) + 1.0)
    now[0] = 90.0  # 10 s left: a generation fits, a generation and its comparison do not
    assert limit.fits(False) and not limit.fits(True)
    now[0] = 96.0
    assert not limit.fits(False)
