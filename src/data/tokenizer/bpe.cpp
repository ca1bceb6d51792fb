// src/data/tokenizer/bpe.cpp — the BPE model of Tokenizer::Impl: initial symbols of a pre-token
// (byte-level or per char), the merge loop and the per-thread word cache.
// Facts followed (Rust `tokenizers` 0.22, read for behaviour, not copied): models/bpe/word.rs
// merge_all (no dropout): a priority queue ordered by (rank, position) with the same stale-entry
// check; models/bpe/model.rs: the cache of short words, continuing_subword_prefix /
// end_of_word_suffix, byte_fallback, unk / fuse_unk.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "byte_table.h"
#include "hash_tables.h"
#include "impl.h"
#include "utf8.h"

namespace twinkle {

using tok::bytes_to_bytelevel;
using tok::hash_bytes;
using tok::tl_current_cache;
using tok::utf8_next;
using tok::WordCache;

namespace tok {

WordCache& tl_cache() {
  thread_local WordCache cache;
  return cache;
}
WordCache& thread_cache(uint64_t uid) {
  WordCache& cache = tl_cache();
  if (cache.owner() != uid) cache.reset(uid);
  return cache;
}
// The cache of the encode() running on this thread (set by encode_into).
thread_local WordCache* tl_current_cache = nullptr;

}  // namespace tok

namespace {

struct MergeEntry {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
};
struct MergeGreater {  // min-heap on (rank, pos)
  bool operator()(const MergeEntry& a, const MergeEntry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

struct Sym {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;
};

}  // namespace

// BPE merge loop over initial symbol ids (models/bpe/word.rs merge_all without dropout).
void Tokenizer::Impl::merge_symbols(std::vector<int32_t>& ids, std::vector<int32_t>& out) const {
  const size_t n = ids.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(ids[0]);
    return;
  }
  if (n == 2) {
    uint32_t r;
    int32_t nid;
    if (merges.get(ids[0], ids[1], r, nid)) out.push_back(nid);
    else out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  if (n <= 64) {
    // Lowest rank first, leftmost on ties: the same merges as the priority queue below
    // (its stale-entry check only ever accepts the pair it was pushed for).
    uint32_t rk[64];
    int32_t nw[64];
    int32_t* v = ids.data();
    size_t m = n;
    for (size_t i = 0; i + 1 < m; ++i)
      if (!merges.get(v[i], v[i + 1], rk[i], nw[i])) rk[i] = UINT32_MAX;
    for (;;) {
      uint32_t best = UINT32_MAX;
      size_t bi = 0;
      for (size_t i = 0; i + 1 < m; ++i)
        if (rk[i] < best) {
          best = rk[i];
          bi = i;
        }
      if (best == UINT32_MAX) break;
      v[bi] = nw[bi];
      for (size_t i = bi + 1; i + 1 < m; ++i) {
        v[i] = v[i + 1];
        rk[i] = rk[i + 1];
        nw[i] = nw[i + 1];
      }
      --m;
      if (bi > 0 && !merges.get(v[bi - 1], v[bi], rk[bi - 1], nw[bi - 1])) rk[bi - 1] = UINT32_MAX;
      if (bi + 1 < m && !merges.get(v[bi], v[bi + 1], rk[bi], nw[bi])) rk[bi] = UINT32_MAX;
    }
    out.insert(out.end(), v, v + m);
    return;
  }
  thread_local std::vector<Sym> sy;
  thread_local std::vector<MergeEntry> heap;
  sy.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i)
    sy[i] = Sym{ids[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, 1};
  for (size_t i = 0; i + 1 < n; ++i) {
    uint32_t r;
    int32_t nid;
    if (merges.get(ids[i], ids[i + 1], r, nid)) heap.push_back({r, static_cast<uint32_t>(i), nid});
  }
  std::make_heap(heap.begin(), heap.end(), MergeGreater{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), MergeGreater{});
    const MergeEntry top = heap.back();
    heap.pop_back();
    Sym& cur = sy[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    const Sym right = sy[next_pos];
    uint32_t r;
    int32_t nid;
    if (!merges.get(cur.id, right.id, r, nid) || nid != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    sy[next_pos].len = 0;
    if (right.next >= 0) sy[right.next].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      if (merges.get(sy[cur.prev].id, cur.id, r, nid)) {
        heap.push_back({r, static_cast<uint32_t>(cur.prev), nid});
        std::push_heap(heap.begin(), heap.end(), MergeGreater{});
      }
    }
    if (cur.next >= 0) {
      if (merges.get(cur.id, sy[cur.next].id, r, nid)) {
        heap.push_back({r, top.pos, nid});
        std::push_heap(heap.begin(), heap.end(), MergeGreater{});
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (sy[i].len != 0) out.push_back(sy[i].id);
}

// Byte-level word: raw bytes, each byte's char is a vocab token.
void Tokenizer::Impl::bpe_bytes(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    const int32_t id = byte_id[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);
    else if (unk_id >= 0) out.push_back(unk_id);
    return;
  }
  if (ignore_merges) {
    auto it = vocab_raw.find(std::string(word));
    if (it != vocab_raw.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  if (word.size() == 2) {
    ids.assign({byte_id[static_cast<unsigned char>(word[0])], byte_id[static_cast<unsigned char>(word[1])]});
    if (ids[0] >= 0 && ids[1] >= 0) {
      merge_symbols(ids, out);
      return;
    }
  }
  WordCache* cache = nullptr;
  uint64_t h = 0;
  if (word.size() < WordCache::kMaxWord) {
    cache = tl_current_cache;
    h = hash_bytes(word.data(), word.size());
    if (cache->lookup(word.data(), word.size(), h, out)) return;
  }
  ids.clear();
  bool missing = false;
  for (unsigned char c : word) {
    if (byte_id[c] >= 0) ids.push_back(byte_id[c]);
    else missing = true;
  }
  if (missing) {  // rare: a vocab without some byte; fall back to the generic char path
    bpe_chars(bytes_to_bytelevel(word), out);
    return;
  }
  const size_t before = out.size();
  merge_symbols(ids, out);
  if (cache) cache->insert(word.data(), word.size(), h, out.data() + before, out.size() - before);
}

// Generic word (token strings are the vocab's own chars): initial symbols per char with
// continuing_subword_prefix / end_of_word_suffix, byte_fallback, unk (fuse_unk).
void Tokenizer::Impl::bpe_chars(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  bool last_unk = false;
  size_t i = 0;
  std::string piece;
  while (i < word.size()) {
    const size_t b = i;
    utf8_next(word, i);
    piece.assign(word.substr(b, i - b));
    if (b > 0) piece = cont_prefix + piece;
    if (i == word.size()) piece += end_suffix;
    auto it = vocab.find(piece);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      last_unk = false;
      continue;
    }
    if (byte_fallback) {
      std::vector<int32_t> fb;
      bool ok = true;
      for (size_t k = b; k < i; ++k) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned char>(word[k]));
        auto f = vocab.find(buf);
        if (f == vocab.end()) {
          ok = false;
          break;
        }
        fb.push_back(f->second);
      }
      if (ok) {
        ids.insert(ids.end(), fb.begin(), fb.end());
        last_unk = false;
        continue;
      }
    }
    if (unk_id >= 0) {
      if (!(fuse_unk && last_unk)) ids.push_back(unk_id);
      last_unk = true;
    }
  }
  merge_symbols(ids, out);
}

void Tokenizer::Impl::model_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (byte_level) bpe_bytes(word, out);
  else bpe_chars(word, out);
}

}  // namespace twinkle
