"""A correct Week 3 submission in tiny-llm's layout, backed by this project's code."""
