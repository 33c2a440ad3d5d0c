from extensions import tiny_llm_ext

paged_attention = tiny_llm_ext.paged_attention
