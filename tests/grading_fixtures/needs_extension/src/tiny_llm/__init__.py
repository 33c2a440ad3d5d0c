"""A submission whose attention lives in its C++ extension, and the extension does not compile."""
