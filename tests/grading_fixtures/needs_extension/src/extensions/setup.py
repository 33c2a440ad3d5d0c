from setuptools import Extension, setup

setup(
    name="tiny_llm_ext",
    ext_modules=[Extension("tiny_llm_ext._ext", ["src/paged_attention.cpp"], language="c++")],
)
