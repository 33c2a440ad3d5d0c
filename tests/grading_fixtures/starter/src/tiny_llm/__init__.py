"""The course's Week 3 starter as a student receives it: nothing implemented yet."""
