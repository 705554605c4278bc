"""The login throttle's arithmetic, on a clock the test moves."""

from __future__ import annotations

import pytest

from mlyard.errors import TooManyRequests
from mlyard.server.http.login_throttle import LoginThrottle


def test_an_account_is_locked_after_its_failures_until_the_oldest_leaves_the_window() -> None:
    throttle = LoginThrottle(max_failures=3, max_address_failures=100, window=60)
    for at in (0, 10, 20):
        throttle.check("ann", "10.0.0.1", now=at)
        throttle.failed("ann", "10.0.0.1", now=at)
    with pytest.raises(TooManyRequests) as caught:
        throttle.check("ann", "10.0.0.9", now=30)  # from anywhere
    assert caught.value.retry_after == 30 and "user 'ann'" in caught.value.message
    throttle.check("bob", "10.0.0.1", now=30)  # others are not locked out
    throttle.check("ann", "10.0.0.1", now=60.5)  # the first failure has left the window


def test_an_address_is_locked_after_its_own_larger_number_of_failures() -> None:
    throttle = LoginThrottle(max_failures=3, max_address_failures=5, window=60)
    for number in range(5):
        throttle.check(f"name{number}", "10.0.0.2", now=number)
        throttle.failed(f"name{number}", "10.0.0.2", now=number)
    with pytest.raises(TooManyRequests) as caught:
        throttle.check("someone", "10.0.0.2", now=5)
    assert "address 10.0.0.2" in caught.value.message and caught.value.retry_after == 55
    throttle.check("someone", "10.0.0.3", now=5)


def test_a_success_clears_the_account_but_not_the_address() -> None:
    throttle = LoginThrottle(max_failures=2, max_address_failures=3, window=60)
    throttle.failed("ann", "10.0.0.1", now=0)
    throttle.failed("ann", "10.0.0.1", now=1)
    throttle.succeeded("ann")
    throttle.check("ann", "10.0.0.4", now=2)
    throttle.failed("ann", "10.0.0.1", now=2)
    with pytest.raises(TooManyRequests):
        throttle.check("carl", "10.0.0.1", now=3)
