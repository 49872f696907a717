"""Each test reads the settings its own environment gives: ``get_settings`` is cached per process, and a test that
set ``BAMBOO_*`` variables passed or failed by which test had read the settings before it (``keys retire`` found
another test's admin keys file). The two tests below run in this order in one process."""

from bamboo.settings import get_settings


def test_a_first_test_reads_its_deployment(monkeypatch):
    monkeypatch.setenv("BAMBOO_DEPLOYMENT", "first-deployment")
    assert get_settings().deployment == "first-deployment"


def test_a_later_test_reads_its_own_not_the_first_tests(monkeypatch):
    monkeypatch.setenv("BAMBOO_DEPLOYMENT", "later-deployment")
    assert get_settings().deployment == "later-deployment"
