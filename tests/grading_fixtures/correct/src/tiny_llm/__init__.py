"""A correct Week 3 submission in tiny-llm's layout: this project's implementation (impl/) behind the course names."""
