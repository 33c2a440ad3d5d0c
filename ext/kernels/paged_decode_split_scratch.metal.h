// Mirror of paged_decode_split_scratch.cuh for Metal: the split decode's one
// float32 output, in 4-byte words (partial states [R, S, partial_entry(D)], one counter
// per threadgroup column, the fill value, then the 16-byte aligned output).
#ifndef PAGECHECK_PAGED_DECODE_SPLIT_SCRATCH_METAL_H
#define PAGECHECK_PAGED_DECODE_SPLIT_SCRATCH_METAL_H

namespace pagecheck {

constant constexpr int MAX_MERGED_SPLITS = 64;

constexpr int partial_entry(int head_dim) {
  return (head_dim + 2 + 3) / 4 * 4;
}

struct SplitScratch {
  long partial_words;
  long counters;
  long base;
  long out_begin;
  long out_words;
  long total_words;
};

inline SplitScratch split_scratch(long rows, int splits, int head_dim, long blocks, int itemsize) {
  SplitScratch s;
  s.partial_words = rows * splits * partial_entry(head_dim);
  s.counters = s.partial_words;
  s.base = s.counters + blocks;
  s.out_begin = (s.base + 1 + 3) / 4 * 4;
  s.out_words = (rows * head_dim * itemsize + 3) / 4;
  s.total_words = s.out_begin + s.out_words;
  return s;
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_SPLIT_SCRATCH_METAL_H
