"""The login throttle's arithmetic, on a clock the test moves."""

from __future__ import annotations

import pytest

from mlyard.errors import TooManyRequests
from mlyard.server.http.login_throttle import LoginThrottle


def fail(throttle: LoginThrottle, user: str, address: str, at: float) -> None:
    throttle.check(user, address, now=at)
    throttle.failed(user, address, now=at)


def test_failures_for_a_user_from_one_address_wait_a_doubling_delay_up_to_a_cap() -> None:
    throttle = LoginThrottle(free_failures=3, first_delay=1, max_delay=8, max_address_failures=1000)
    for at in (0, 0.1, 0.2):
        fail(throttle, "ann", "10.0.0.1", at)
    with pytest.raises(TooManyRequests) as caught:
        throttle.check("ann", "10.0.0.1", now=0.5)
    assert caught.value.retry_after == 1 and "user 'ann' from this address" in caught.value.message
    assert [throttle.delay(count) for count in range(2, 9)] == [0, 1, 2, 4, 8, 8, 8]
    at = 0.2
    for count in range(3, 7):  # each retry as soon as it is allowed
        at += throttle.delay(count)
        fail(throttle, "ann", "10.0.0.1", at)
    with pytest.raises(TooManyRequests) as caught:
        throttle.check("ann", "10.0.0.1", now=at + 7.5)
    assert caught.value.retry_after == 1
    throttle.check("ann", "10.0.0.1", now=at + 8)


def test_a_flood_of_failures_from_one_address_never_delays_the_user_at_another() -> None:
    throttle = LoginThrottle(free_failures=3, first_delay=1, max_delay=300, max_address_failures=10_000)
    at = 0.0
    for _ in range(200):
        pair_wait = throttle.delay(200)
        throttle.failed("ann", "203.0.113.9", now=at)
        at += 0.01
    assert pair_wait == 300
    with pytest.raises(TooManyRequests):
        throttle.check("ann", "203.0.113.9", now=at)
    throttle.check("ann", "10.0.0.1", now=at)  # the user's own machine is not locked out
    throttle.check("bob", "203.0.113.9", now=at)  # nor are other users at that address, below its cap


def test_an_address_is_capped_after_its_own_larger_number_of_failures() -> None:
    throttle = LoginThrottle(free_failures=3, max_address_failures=5, window=60)
    for number in range(5):
        fail(throttle, f"name{number}", "10.0.0.2", number)
    with pytest.raises(TooManyRequests) as caught:
        throttle.check("someone", "10.0.0.2", now=5)
    assert "address 10.0.0.2" in caught.value.message and caught.value.retry_after == 55
    throttle.check("someone", "10.0.0.3", now=5)
    throttle.check("someone", "10.0.0.2", now=60.5)  # the first failure has left the window


def test_a_success_clears_its_user_and_address_but_not_the_address_cap() -> None:
    throttle = LoginThrottle(free_failures=2, max_address_failures=3, window=60)
    fail(throttle, "ann", "10.0.0.1", 0)
    fail(throttle, "ann", "10.0.0.1", 0.1)
    throttle.succeeded("ann", "10.0.0.1")
    throttle.check("ann", "10.0.0.1", now=0.2)
    throttle.failed("ann", "10.0.0.1", now=0.2)
    with pytest.raises(TooManyRequests):
        throttle.check("carl", "10.0.0.1", now=0.3)
