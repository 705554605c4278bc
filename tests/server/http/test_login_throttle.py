"""The login throttle's arithmetic, on a clock the test moves."""

from __future__ import annotations

import pytest

from mlyard.errors import TooManyRequests
from mlyard.server.http.login_throttle import LoginThrottle


def fail(throttle: LoginThrottle, user: str, address: str, at: float) -> None:
    throttle.check(user, address, now=at)
    throttle.failed(user, address, now=at)


def test_failures_for_a_user_from_one_address_wait_a_doubling_delay_up_to_a_cap() -> None:
    throttle = LoginThrottle(free_failures=3, first_delay=1, max_delay=8)
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
    throttle = LoginThrottle(free_failures=3, first_delay=1, max_delay=300)
    at = 0.0
    for _ in range(200):
        pair_wait = throttle.delay(200)
        throttle.failed("ann", "203.0.113.9", now=at)
        at += 0.01
    assert pair_wait == 300
    with pytest.raises(TooManyRequests):
        throttle.check("ann", "203.0.113.9", now=at)
    throttle.check("ann", "10.0.0.1", now=at)  # the user's own machine is not locked out
    throttle.check("bob", "203.0.113.9", now=at)  # nor are other users at that address


def test_many_names_failing_from_one_address_never_lock_out_the_others_there() -> None:
    """Behind a proxy every user shares its address: failures for any number of names there
    (a sprayer's, or colleagues' typos) never refuse another user at that address."""
    throttle = LoginThrottle(free_failures=3)
    for number in range(500):
        for attempt in range(3):
            fail(throttle, f"name{number}", "10.0.0.2", number + attempt / 10)
    throttle.check("someone", "10.0.0.2", now=500)
    throttle.check("name0", "10.0.0.2", now=500)  # its delays have passed


def test_a_success_clears_its_user_and_address() -> None:
    throttle = LoginThrottle(free_failures=2, first_delay=10)
    fail(throttle, "ann", "10.0.0.1", 0)
    fail(throttle, "ann", "10.0.0.1", 0.1)
    with pytest.raises(TooManyRequests):
        throttle.check("ann", "10.0.0.1", now=0.2)
    throttle.succeeded("ann", "10.0.0.1")
    throttle.check("ann", "10.0.0.1", now=0.2)
    throttle.check("carl", "10.0.0.1", now=0.3)
