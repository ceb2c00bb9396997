from __future__ import annotations

from services.cdc_relay.confirms import ConfirmBook


def test_single_and_multiple_acks() -> None:
    book: ConfirmBook[str] = ConfirmBook()
    for name in "abcd":
        book.sent(name, name)
    assert book.acked(2, multiple=False).confirmed == ["b"]
    assert book.acked(3, multiple=True).confirmed == ["a", "c"]
    assert len(book) == 1


def test_a_returned_message_acked_is_a_failure() -> None:
    book: ConfirmBook[str] = ConfirmBook()
    book.sent("m1", "a")
    book.sent("m2", "b")
    book.returned("m2")
    outcome = book.acked(2, multiple=True)
    assert outcome.confirmed == ["a"] and outcome.failed == ["b"]
    book.sent("m2", "b")  # the retry, routed this time
    assert book.acked(3, multiple=False).confirmed == ["b"]


def test_nacks_fail_and_reset_hands_everything_back() -> None:
    book: ConfirmBook[str] = ConfirmBook()
    for name in "abc":
        book.sent(name, name)
    assert book.nacked(1, multiple=False).failed == ["a"]
    assert book.reset() == ["b", "c"]
    assert book.sent("x", "x") == 1  # a new channel numbers from 1
