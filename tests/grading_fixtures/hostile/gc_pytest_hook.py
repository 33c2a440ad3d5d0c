"""Hostile: finds the pytest session through gc and registers a hook that turns every report into a pass."""

import gc

try:
    for thing in gc.get_objects():
        if type(thing).__name__ == "PytestPluginManager":

            class AllPass:
                def pytest_runtest_logreport(self, report):
                    report.outcome, report.longrepr = "passed", None

            thing.register(AllPass(), "all-pass")
except Exception:
    pass


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Loads, so that the checks run while the attack above is in place; every output is wrong."""
    return query
