// Host emulation of CUDA for the CUDA backend's sources (what it models and what it cannot: cuda_shim.h).
// Three parts: the error state, the device heap with its pointer checks, and the fiber scheduler that runs
// a block's threads on one OS thread. Test code.
#include "cuda_shim.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TWINKLE_SHIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(TWINKLE_SHIM_ASAN)
#define TWINKLE_SHIM_ASAN 1
#endif
#ifdef TWINKLE_SHIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// The context switch: our own on x86-64 (TWINKLE_SHIM_UCONTEXT selects the portable one there too),
// ucontext elsewhere (each switch then costs a sigprocmask system call, and ASan's swapcontext
// interceptor clears the target stack's shadow).
#if defined(__x86_64__) && !defined(TWINKLE_SHIM_UCONTEXT)
#define TWINKLE_SHIM_X86_SWITCH 1
#else
#include <ucontext.h>
#endif

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace twinkle_shim {

// ---------------------------------------------------------------- errors
namespace {

// Per host thread, as the CUDA runtime's last error: the code and the detail of the last failure.
thread_local cudaError_t t_last = cudaSuccess;
thread_local cudaError_t t_detail_code = cudaSuccess;
thread_local std::string t_detail;
thread_local cublasStatus_t t_blas_detail_code = CUBLAS_STATUS_SUCCESS;
thread_local std::string t_blas_detail;

std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  return buf;
}

// Records e with its detail for cudaGetLastError / cudaGetErrorString, prints the detail, returns e.
__attribute__((format(printf, 2, 3))) cudaError_t fail(cudaError_t e, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  t_detail = vformat(fmt, ap);
  va_end(ap);
  t_detail_code = e;
  t_last = e;
  std::fprintf(stderr, "cuda shim: %s\n", t_detail.c_str());
  return e;
}

__attribute__((format(printf, 2, 3))) cublasStatus_t blas_fail(cublasStatus_t s, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  t_blas_detail = vformat(fmt, ap);
  va_end(ap);
  t_blas_detail_code = s;
  std::fprintf(stderr, "cuda shim: %s\n", t_blas_detail.c_str());
  return s;
}

// The function symbol of the object file `path` (loaded at `base`) that contains `addr`, demangled, from
// its ELF symbol table (.symtab: kernels live in anonymous namespaces, which the dynamic symbols dladdr
// reads never list); empty when the file has none.
std::string elf_symbol(const char* path, uintptr_t base, uintptr_t addr) {
  FILE* f = std::fopen(path, "rb");
  if (!f) return {};
  std::vector<char> img;
  char chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) img.insert(img.end(), chunk, chunk + n);
  std::fclose(f);
  auto in = [&](size_t off, size_t len) { return off <= img.size() && len <= img.size() - off; };
  if (!in(0, sizeof(Elf64_Ehdr)) || std::memcmp(img.data(), ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64)
    return {};
  Elf64_Ehdr eh;
  std::memcpy(&eh, img.data(), sizeof eh);
  const uintptr_t rel = eh.e_type == ET_EXEC ? addr : addr - base;  // symbol values of a PIE are offsets
  if (!in(eh.e_shoff, size_t{eh.e_shnum} * sizeof(Elf64_Shdr))) return {};
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), img.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type != SHT_SYMTAB || s.sh_link >= sh.size() || !in(s.sh_offset, s.sh_size)) continue;
    const Elf64_Shdr& strs = sh[s.sh_link];
    if (!in(strs.sh_offset, strs.sh_size)) continue;
    for (size_t i = 0; i < s.sh_size / sizeof(Elf64_Sym); ++i) {
      Elf64_Sym sym;
      std::memcpy(&sym, img.data() + s.sh_offset + i * sizeof(Elf64_Sym), sizeof sym);
      const uint64_t size = std::max<uint64_t>(sym.st_size, 1);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || rel < sym.st_value || rel >= sym.st_value + size ||
          sym.st_name >= strs.sh_size)
        continue;
      const char* mangled = img.data() + strs.sh_offset + sym.st_name;
      int status = -1;
      char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
      std::string name = status == 0 && d ? d : mangled;
      std::free(d);
      return name;
    }
  }
  return {};
}

// The name of a kernel from its address: the ELF symbol table of the file that holds it, else the
// sanitizer's symbolizer, else dladdr, else the address.
std::string kernel_name(const void* fn) {
  static std::mutex mu;
  static std::map<const void*, std::string>* names = new std::map<const void*, std::string>();
  std::lock_guard<std::mutex> lk(mu);
  if (auto it = names->find(fn); it != names->end()) return it->second;
  std::string name;
  Dl_info info{};
  const bool found = dladdr(fn, &info) != 0;
  const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase), addr = reinterpret_cast<uintptr_t>(fn);
  if (found && info.dli_fname && info.dli_fname[0]) name = elf_symbol(info.dli_fname, base, addr);
  if (name.empty() && found) name = elf_symbol("/proc/self/exe", base, addr);  // the main program's may be no path
#ifdef TWINKLE_SHIM_ASAN
  if (name.empty()) {
    char buf[1024] = {0};
    // the symbolizer takes a return address and looks up the instruction before it
    __sanitizer_symbolize_pc(const_cast<char*>(static_cast<const char*>(fn)) + 1, "%f", buf, sizeof buf);
    if (buf[0] && std::strcmp(buf, "??") != 0 && std::strncmp(buf, "<null>", 6) != 0) name = buf;
  }
#endif
  if (name.empty() && found && info.dli_sname) name = info.dli_sname;
  if (name.empty()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "<kernel at %p>", fn);
    name = buf;
  }
  names->emplace(fn, name);
  return name;
}

}  // namespace

// ---------------------------------------------------------------- device heap
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHuge = size_t{2} << 20;  // a transparent huge page

// One reserved range of addresses (PROT_NONE until allocated). A block is [base, base + size) with
// size rounded up to pages and one unmapped page after it; the bytes past the requested size are
// poisoned for ASan. Fresh addresses are handed out first (the bump pointer); freed ranges are reused,
// first fit, only once the bump pointer reached the end, so a stale device pointer keeps faulting for long.
class DeviceHeap {
 public:
  enum class Where { Host, Live, Stale };  // Stale: inside the heap but in no live block
  struct Lookup {
    Where where = Where::Host;
    uintptr_t base = 0;
    size_t bytes = 0;  // the requested size of the live block
  };

  DeviceHeap() {
    size_t mib = size_t{32} << 10;  // 32 GiB of addresses by default
    if (const char* v = std::getenv("TWINKLE_CUDA_SHIM_DEVICE_MIB"); v && *v) mib = std::strtoull(v, nullptr, 10);
    cap_ = std::max<size_t>(mib, 1) << 20;
    void* p = mmap(nullptr, cap_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cuda shim: cannot reserve %zu MiB of addresses for the device heap\n", cap_ >> 20);
      std::abort();
    }
    lo_ = reinterpret_cast<uintptr_t>(p);
    bump_ = lo_;
    const char* open = std::getenv("TWINKLE_CUDA_SHIM_HOST_ACCESS");
    guard_ = !(open && std::strcmp(open, "1") == 0);
  }

  /// Device memory is open to the host only inside an access scope (DeviceAccess: a kernel launch, a
  /// copy, a memset, a cuBLAS call); outside one every live block is PROT_NONE, so host code that reads
  /// or writes device memory faults there, as it would with a GPU's memory (ASan reports the SEGV with
  /// the host stack). TWINKLE_CUDA_SHIM_HOST_ACCESS=1 leaves device memory open throughout.
  void open_access() {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_++ == 0 && guard_) protect_all_locked(PROT_READ | PROT_WRITE);
  }
  void close_access() {
    std::lock_guard<std::mutex> lk(mu_);
    if (--open_ == 0 && guard_) protect_all_locked(PROT_NONE);
  }

  size_t capacity() const { return cap_; }

  void* alloc(size_t n) {
    // A block of 2 MiB or more starts on a 2 MiB boundary and spans whole 2 MiB pages (transparent huge
    // pages, MADV_HUGEPAGE): the access scopes' mprotect of every live block then changes one entry per
    // 2 MiB instead of 512 (measured on 256 MiB: 4.8 ms -> 0.01 ms per close-and-open), which was a third
    // of an emulated training step. The guard page after the block stays.
    const bool huge = n >= kHuge;
    const size_t span = (huge ? round_up_to(n, kHuge) : round_up(std::max<size_t>(n, 1))) + kPage;
    std::lock_guard<std::mutex> lk(mu_);
    uintptr_t base = 0;
    const uintptr_t start = huge ? round_up_to(bump_, kHuge) : bump_;
    if (start + span <= lo_ + cap_) {
      if (start > bump_) give_back_locked(bump_, start - bump_);  // the gap before the aligned block: reusable
      base = start;
      bump_ = start + span;
    } else {
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->second >= span) {
          base = it->first;
          const size_t rest = it->second - span;
          free_.erase(it);
          if (rest) free_.emplace(base + span, rest);
          break;
        }
      if (!base) return nullptr;
    }
    const size_t mapped = span - kPage;
    if (mprotect(reinterpret_cast<void*>(base), mapped, open_ > 0 || !guard_ ? PROT_READ | PROT_WRITE : PROT_NONE) !=
        0) {
      give_back_locked(base, span);
      return nullptr;
    }
    if (huge && base % kHuge == 0) madvise(reinterpret_cast<void*>(base), mapped, MADV_HUGEPAGE);
    live_.emplace(base, Block{n, span});
#ifdef TWINKLE_SHIM_ASAN
    if (mapped > n) ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(base + n), mapped - n);
#endif
    return reinterpret_cast<void*>(base);
  }

  /// False when p is not the start of a live block.
  bool free(void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(a);
    if (it == live_.end()) return false;
    const size_t span = it->second.span;
    live_.erase(it);
#ifdef TWINKLE_SHIM_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, span - kPage);
#endif
    // a fresh PROT_NONE mapping over the block: its memory goes back, any later access faults
    mmap(p, span - kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    give_back_locked(a, span);
    return true;
  }

  Lookup lookup(const void* p) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a < lo_ || a >= lo_ + cap_) return {};
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.upper_bound(a);
    if (it != live_.begin()) {
      --it;
      if (a <= it->first + it->second.bytes) return {Where::Live, it->first, it->second.bytes};
    }
    return {Where::Stale, 0, 0};
  }

 private:
  struct Block {
    size_t bytes, span;
  };
  static size_t round_up(size_t n) { return (n + kPage - 1) / kPage * kPage; }
  static size_t round_up_to(size_t n, size_t a) { return (n + a - 1) / a * a; }
  void protect_all_locked(int prot) {
    for (const auto& [base, b] : live_) mprotect(reinterpret_cast<void*>(base), b.span - kPage, prot);
  }
  void give_back_locked(uintptr_t base, size_t span) {
    auto next = free_.lower_bound(base);
    if (next != free_.end() && base + span == next->first) {  // merge with the range after
      span += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {  // and with the range before
      auto prev = std::prev(next);
      if (prev->first + prev->second == base) {
        prev->second += span;
        return;
      }
    }
    free_.emplace(base, span);
  }

  mutable std::mutex mu_;
  uintptr_t lo_ = 0, bump_ = 0;
  size_t cap_ = 0;
  std::map<uintptr_t, Block> live_;
  std::map<uintptr_t, size_t> free_;  // base -> span
  int open_ = 0;        // nesting depth of access scopes
  bool guard_ = true;   // false: TWINKLE_CUDA_SHIM_HOST_ACCESS=1
};

DeviceHeap& heap() {
  static DeviceHeap* h = new DeviceHeap();  // never destroyed: device memory may be freed during static destruction
  return *h;
}

/// The host may touch device memory while one lives (DeviceHeap::open_access).
struct DeviceAccess {
  DeviceAccess() { heap().open_access(); }
  ~DeviceAccess() { heap().close_access(); }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

const char* where_text(DeviceHeap::Where w) {
  return w == DeviceHeap::Where::Host ? "a host pointer, not device memory"
                                      : "inside the device heap but in no live allocation (freed device memory?)";
}

// Empty when [p, p + n) lies inside one live device block; else why not.
std::string device_range_error(const void* p, size_t n) {
  const DeviceHeap::Lookup l = heap().lookup(p);
  char buf[256];
  if (l.where != DeviceHeap::Where::Live) {
    std::snprintf(buf, sizeof buf, "%p is %s", p, where_text(l.where));
    return buf;
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a + n > l.base + l.bytes) {
    std::snprintf(buf, sizeof buf, "[%p, +%zu B) runs %zu B past the end of its device allocation of %zu B at %p", p,
                  n, static_cast<size_t>(a + n - l.base - l.bytes), l.bytes, reinterpret_cast<void*>(l.base));
    return buf;
  }
  return {};
}

// Empty when p is outside the device heap (host memory); else why not.
std::string host_pointer_error(const void* p) {
  const DeviceHeap::Lookup l = heap().lookup(p);
  if (l.where == DeviceHeap::Where::Host) return {};
  char buf[160];
  std::snprintf(buf, sizeof buf, "%p is %s", p,
                l.where == DeviceHeap::Where::Live
                    ? "device memory, not a host pointer"
                    : "inside the device heap (freed device memory), not a host pointer");
  return buf;
}

}  // namespace

bool check_kernel_pointer(const void* fn, const char* launch_sig, size_t index, size_t count, std::string_view type,
                          const void* p) {
  if (!p) return true;
  const DeviceHeap::Lookup l = heap().lookup(p);
  if (l.where == DeviceHeap::Where::Live) return true;
  std::string name = kernel_name(fn);
  if (name.rfind("<kernel at", 0) == 0) name += std::string(" (") + launch_sig + ")";
  fail(cudaErrorIllegalAddress, "launch of kernel %s refused: argument %zu of %zu (%.*s) = %p is %s", name.c_str(),
       index + 1, count, static_cast<int>(type.size()), type.data(), p, where_text(l.where));
  return false;
}

// ---------------------------------------------------------------- fibers
namespace {

#ifdef TWINKLE_SHIM_ASAN
inline void start_switch(void** fake_save, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake_save, bottom, size);
}
inline void finish_switch(void* fake_save, const void** bottom_old, size_t* size_old) {
  __sanitizer_finish_switch_fiber(fake_save, bottom_old, size_old);
}
#else
inline void start_switch(void**, const void*, size_t) {}
inline void finish_switch(void*, const void**, size_t*) {}
#endif

#ifdef TWINKLE_SHIM_X86_SWITCH
// switch_stack(save, to): pushes the callee-saved registers, MXCSR and the x87 control word, stores the
// stack pointer to *save, loads `to` and pops the same from there (System V AMD64 ABI). A new fiber's
// stack is laid out so that the first switch to it "returns" into twinkle_shim_fiber_trampoline, which calls
// r13(r12).
extern "C" void twinkle_shim_switch_stack(void** save, void* to);
extern "C" void twinkle_shim_fiber_trampoline();
asm(R"(
  .pushsection .text
  .globl twinkle_shim_switch_stack
  .hidden twinkle_shim_switch_stack
  .type twinkle_shim_switch_stack, @function
twinkle_shim_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size twinkle_shim_switch_stack, .-twinkle_shim_switch_stack

  .globl twinkle_shim_fiber_trampoline
  .hidden twinkle_shim_fiber_trampoline
  .type twinkle_shim_fiber_trampoline, @function
twinkle_shim_fiber_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size twinkle_shim_fiber_trampoline, .-twinkle_shim_fiber_trampoline
  .popsection
)");
#endif

constexpr size_t kStackBytes = 256 * 1024;  // per fiber (ASan frames and an ASan report need room)

struct Fiber {
  char* map = nullptr;  // [guard page][stack]
  char* stack = nullptr;
#ifdef TWINKLE_SHIM_X86_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  void* fake = nullptr;  // ASan's fake stack while switched away
};

enum : uint8_t { kUnstarted, kRunning, kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

// One block's run: thread states and barrier bookkeeping.
struct BlockRun {
  void (*thunk)(void*) = nullptr;
  void* ctx = nullptr;
  dim3 block, grid, idx;
  unsigned nt = 0, nwarps = 0;
  unsigned next_unstarted = 0, n_done = 0, at_block = 0;
  std::vector<uint8_t> state;
  std::vector<Fiber*> holder;  // the fiber a started, unfinished thread runs on
  std::vector<unsigned> ready;  // released threads, resumed in this order
  size_t ready_head = 0;
  std::vector<unsigned> warp_waiting, warp_done, warp_size;
  std::vector<uint64_t> warp_gen;
  uint64_t block_gen = 0;
  std::vector<double> slot;  // [2][nt]: shuffle deposits, double-buffered by the warp's barrier generation
  int or_acc[2] = {0, 0};    // __syncthreads_or, double-buffered by the block's barrier generation
  std::vector<char> smem;
};

void fiber_main(void* arg);

// The fibers of one OS thread and the scheduler's side of the switches.
struct Worker {
  std::vector<Fiber*> all, idle;
  BlockRun* block = nullptr;
  Fiber* cur = nullptr;  // the fiber running now (null: the scheduler)
  unsigned cur_tid = 0;
#ifdef TWINKLE_SHIM_X86_SWITCH
  void* sched_sp = nullptr;
#else
  ucontext_t sched_uc;
#endif
  FiberStats stats;
  const void* sched_bottom = nullptr;  // the scheduler's stack, for ASan (learned at the first switch)
  size_t sched_size = 0;

  ~Worker() {
    for (Fiber* f : all) {
      munmap(f->map, kStackBytes + kPage);
      delete f;
    }
  }

  void init_context(Fiber* f) {
#ifdef TWINKLE_SHIM_ASAN
    ASAN_UNPOISON_MEMORY_REGION(f->stack, kStackBytes);  // frames abandoned by a failed launch
#endif
#ifdef TWINKLE_SHIM_X86_SWITCH
    // [mxcsr|fpucw][r15][r14][r13][r12][rbx][rbp][ret] from sp upwards; rsp 16-aligned at the trampoline
    auto* top = reinterpret_cast<uint64_t*>(f->stack + kStackBytes - 16);
    uint64_t* sp = top - 8;
    uint16_t cw = 0;
    asm volatile("fnstcw %0" : "=m"(cw));
    sp[0] = static_cast<uint64_t>(__builtin_ia32_stmxcsr()) | (static_cast<uint64_t>(cw) << 32);
    sp[1] = sp[2] = 0;                                            // r15, r14
    sp[3] = reinterpret_cast<uint64_t>(&fiber_main);              // r13: the entry
    sp[4] = reinterpret_cast<uint64_t>(f);                        // r12: its argument
    sp[5] = sp[6] = 0;                                            // rbx, rbp
    sp[7] = reinterpret_cast<uint64_t>(&twinkle_shim_fiber_trampoline);
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = kStackBytes;
    f->uc.uc_link = nullptr;
    // makecontext passes ints: the fiber finds itself in the worker (cur is set before the first switch)
    makecontext(&f->uc, reinterpret_cast<void (*)()>(&fiber_start_uc), 0);
#endif
    f->fake = nullptr;
  }
#ifndef TWINKLE_SHIM_X86_SWITCH
  static void fiber_start_uc();
#endif

  Fiber* get_idle() {
    if (!idle.empty()) {
      Fiber* f = idle.back();
      idle.pop_back();
      return f;
    }
    auto* f = new Fiber();
    void* m = mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "cuda shim: cannot map a fiber stack\n");
      std::abort();
    }
    f->map = static_cast<char*>(m);
    mprotect(f->map, kPage, PROT_NONE);  // guard page below the stack: an overflow faults
    f->stack = f->map + kPage;
    init_context(f);
    all.push_back(f);
    ++stats.fibers;
    return f;
  }

  // scheduler -> fiber f (returns when some fiber switches back)
  void resume(Fiber* f) {
    cur = f;
    ++stats.switches;
    void* fake = nullptr;
    start_switch(&fake, f->stack, kStackBytes);
#ifdef TWINKLE_SHIM_X86_SWITCH
    twinkle_shim_switch_stack(&sched_sp, f->sp);
#else
    swapcontext(&sched_uc, &f->uc);
#endif
    finish_switch(fake, nullptr, nullptr);
    cur = nullptr;
  }

  // fiber f -> scheduler (returns when the scheduler resumes f)
  void yield(Fiber* f) {
    ++stats.switches;
    start_switch(&f->fake, sched_bottom, sched_size);
#ifdef TWINKLE_SHIM_X86_SWITCH
    twinkle_shim_switch_stack(&f->sp, sched_sp);
#else
    swapcontext(&f->uc, &sched_uc);
#endif
    finish_switch(f->fake, &sched_bottom, &sched_size);
  }
};

thread_local Worker t_worker;

inline void enter_thread(BlockRun& b, unsigned t) {
  t_worker.cur_tid = t;
  threadIdx = dim3(t % b.block.x, (t / b.block.x) % b.block.y, t / (b.block.x * b.block.y));
}

// A fiber's life: run not-yet-started threads of the current block one after another (a thread that
// reaches a barrier suspends the fiber with it), then wait idle for the next block.
void fiber_main(void* arg) {
  Fiber* self = static_cast<Fiber*>(arg);
  Worker& w = t_worker;
  finish_switch(nullptr, &w.sched_bottom, &w.sched_size);
  for (;;) {
    BlockRun& b = *w.block;
    while (b.next_unstarted < b.nt) {
      const unsigned t = b.next_unstarted++;
      b.state[t] = kRunning;
      b.holder[t] = self;
      enter_thread(b, t);
      b.thunk(b.ctx);
      b.state[t] = kDone;
      b.holder[t] = nullptr;
      ++b.n_done;
      ++b.warp_done[t / 32];
    }
    w.idle.push_back(self);
    w.yield(self);
  }
}

#ifndef TWINKLE_SHIM_X86_SWITCH
void Worker::fiber_start_uc() { fiber_main(t_worker.cur); }
#endif

// The running thread waits at a barrier (state already set); returns when it is released.
inline void suspend() {
  Worker& w = t_worker;
  Fiber* self = w.cur;
  w.yield(self);
}

// Runs one block to completion. False (with the error recorded) when its barriers cannot all be met.
bool run_block(Worker& w, BlockRun& b, const void* fn) {
  for (;;) {
    if (b.ready_head < b.ready.size()) {
      const unsigned t = b.ready[b.ready_head++];
      b.state[t] = kRunning;
      enter_thread(b, t);
      w.resume(b.holder[t]);
      continue;
    }
    b.ready.clear();
    b.ready_head = 0;
    if (b.next_unstarted < b.nt) {
      w.resume(w.get_idle());
      continue;
    }
    if (b.n_done == b.nt) return true;
    // every thread has exited or waits: release the warps whose live lanes all wait at a shuffle, else
    // the block when every live thread waits at __syncthreads
    for (unsigned wp = 0; wp < b.nwarps; ++wp) {
      if (!b.warp_waiting[wp] || b.warp_waiting[wp] + b.warp_done[wp] != b.warp_size[wp]) continue;
      const unsigned t1 = wp * 32 + b.warp_size[wp];
      for (unsigned t = wp * 32; t < t1; ++t)
        if (b.state[t] == kAtWarpBarrier) {
          b.state[t] = kReady;
          b.ready.push_back(t);
        }
      b.warp_waiting[wp] = 0;
      ++b.warp_gen[wp];
    }
    if (!b.ready.empty()) continue;
    if (b.at_block && b.at_block + b.n_done == b.nt) {
      b.or_acc[(b.block_gen + 1) & 1] = 0;  // everyone has read the generation before this one
      ++b.block_gen;
      b.at_block = 0;
      for (unsigned t = 0; t < b.nt; ++t)
        if (b.state[t] == kAtBlockBarrier) {
          b.state[t] = kReady;
          b.ready.push_back(t);
        }
      continue;
    }
    unsigned tb = 0, tw = 0;
    for (unsigned t = 0; t < b.nt; ++t) {
      if (b.state[t] == kAtBlockBarrier) tb = t;
      if (b.state[t] == kAtWarpBarrier) tw = t;
    }
    fail(cudaErrorLaunchFailure,
         "kernel %s, block (%u, %u, %u): barriers that cannot meet: thread %u waits at __syncthreads while thread %u "
         "(warp %u) waits at a warp shuffle its warp's other lanes do not reach",
         kernel_name(fn).c_str(), b.idx.x, b.idx.y, b.idx.z, tb, tw, tw / 32);
    // abandon the suspended threads: their fibers start over
    for (unsigned t = 0; t < b.nt; ++t)
      if (b.holder[t]) {
        w.init_context(b.holder[t]);
        w.idle.push_back(b.holder[t]);
        b.holder[t] = nullptr;
      }
    return false;
  }
}

std::mutex g_mu;
std::map<const void*, int> g_smem_attr;

}  // namespace

void syncthreads() {
  BlockRun& b = *t_worker.block;
  b.state[t_worker.cur_tid] = kAtBlockBarrier;
  ++b.at_block;
  suspend();
}

int syncthreads_or(int p) {
  BlockRun& b = *t_worker.block;
  const unsigned g = b.block_gen & 1;
  b.or_acc[g] |= p != 0;
  syncthreads();
  return b.or_acc[g];
}

template <typename T> T shfl(T v, int delta) {
  BlockRun& b = *t_worker.block;
  const unsigned tid = t_worker.cur_tid, warp = tid / 32, lane = tid % 32;
  double* buf = b.slot.data() + (b.warp_gen[warp] & 1) * b.nt;
  buf[tid] = static_cast<double>(v);
  b.state[tid] = kAtWarpBarrier;
  ++b.warp_waiting[warp];
  suspend();
  const unsigned src = lane + static_cast<unsigned>(delta);
  return src < 32 && warp * 32 + src < b.nt ? static_cast<T>(buf[warp * 32 + src]) : v;
}
float shfl_down(float v, int delta) { return shfl(v, delta); }
double shfl_down(double v, int delta) { return shfl(v, delta); }

FiberStats fiber_stats() { return t_worker.stats; }

void* dyn_smem() { return t_worker.block->smem.data(); }

cudaError_t set_smem_attribute(const void* fn, int bytes) {
  if (bytes > 227 * 1024)
    return fail(cudaErrorInvalidValue,
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize = %d) of kernel %s: above 227 KiB", bytes,
                kernel_name(fn).c_str());
  std::lock_guard<std::mutex> lk(g_mu);
  g_smem_attr[fn] = bytes;
  return cudaSuccess;
}

cudaError_t check_launch_config(const LaunchCfg& cfg) {
  const unsigned nt = cfg.block.x * cfg.block.y * cfg.block.z;
  int allowed = 48 * 1024;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (auto it = g_smem_attr.find(cfg.fn); it != g_smem_attr.end()) allowed = std::max(allowed, it->second);
  }
  if (nt == 0 || nt > 1024 || cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.y > 65535 ||
      cfg.grid.z > 65535 || cfg.grid.x > 2147483647u || cfg.smem > static_cast<size_t>(allowed))
    return fail(cudaErrorInvalidConfiguration,
                "refused launch of kernel %s: block %u threads, grid %u x %u x %u, %zu B dynamic smem (allowed %d)",
                kernel_name(cfg.fn).c_str(), nt, cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.smem, allowed);
  return cudaSuccess;
}

cudaError_t run_grid(const LaunchCfg& cfg, void (*thunk)(void*), void* ctx) {
  if (const cudaError_t e = check_launch_config(cfg)) return e;
  const unsigned nt = cfg.block.x * cfg.block.y * cfg.block.z;
  Worker& w = t_worker;
  if (w.block) return fail(cudaErrorLaunchFailure, "a kernel launch from inside a kernel");
  BlockRun b;
  b.thunk = thunk;
  b.ctx = ctx;
  b.block = cfg.block;
  b.grid = cfg.grid;
  b.nt = nt;
  b.nwarps = (nt + 31) / 32;
  b.state.resize(nt);
  b.holder.resize(nt);
  b.ready.reserve(nt);
  b.warp_waiting.resize(b.nwarps);
  b.warp_done.resize(b.nwarps);
  b.warp_gen.resize(b.nwarps);
  b.warp_size.resize(b.nwarps);
  for (unsigned wp = 0; wp < b.nwarps; ++wp) b.warp_size[wp] = std::min(32u, nt - wp * 32);
  b.slot.assign(2 * size_t{nt}, 0.0);
  blockDim = cfg.block;
  gridDim = cfg.grid;
  w.block = &b;
  cudaError_t rc = cudaSuccess;
  DeviceAccess access;
  for (unsigned bz = 0; bz < cfg.grid.z && rc == cudaSuccess; ++bz)
    for (unsigned by = 0; by < cfg.grid.y && rc == cudaSuccess; ++by)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        b.idx = dim3(bx, by, bz);
        blockIdx = b.idx;
        std::fill(b.state.begin(), b.state.end(), kUnstarted);
        std::fill(b.warp_waiting.begin(), b.warp_waiting.end(), 0u);
        std::fill(b.warp_done.begin(), b.warp_done.end(), 0u);
        b.next_unstarted = b.n_done = b.at_block = 0;
        b.or_acc[0] = b.or_acc[1] = 0;
        b.smem.assign(cfg.smem + 16, static_cast<char>(0x5A));  // poisoned: kernels must write before reading
        if (!run_block(w, b, cfg.fn)) {
          rc = cudaErrorLaunchFailure;
          break;
        }
      }
  w.block = nullptr;
  return rc;
}

// ---------------------------------------------------------------- streams and events
namespace {

// One stream: the queued work in order, counted (an event is a position in this count).
struct Stream {
  std::deque<std::function<cudaError_t()>> q;
  uint64_t queued = 0, done = 0;
  bool blocking = false;  // created without cudaStreamNonBlocking: synchronizes with the legacy stream
  bool live = true;
};

// Every stream and event operation holds this lock; work runs under it (recursive: a queued wait for
// another stream runs that stream's work from inside this one's).
std::recursive_mutex& streams_mu() {
  static auto* m = new std::recursive_mutex();
  return *m;
}
Stream& legacy_stream() {
  static auto* s = new Stream();
  return *s;
}
// The created streams, never freed (a destroyed one stays, marked, so a stale handle is recognised).
std::vector<Stream*>& created_streams() {
  static auto* v = new std::vector<Stream*>();
  return *v;
}
cudaError_t g_async_error = cudaSuccess;  // the first fault of queued work not yet reported

bool eager() {
  static const bool on = [] {
    const char* v = std::getenv("TWINKLE_CUDA_SHIM_EAGER");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// The stream of handle h (nullptr: the legacy stream); null, with the error recorded, for a handle that is no
// live stream.
Stream* stream_of(cudaStream_t h, const char* call) {
  if (!h) return &legacy_stream();
  auto* s = static_cast<Stream*>(h);
  const auto& all = created_streams();
  if (std::find(all.begin(), all.end(), s) == all.end() || !s->live) {
    fail(cudaErrorInvalidResourceHandle, "%s(stream %p): not a live stream (never created, or destroyed)", call, h);
    return nullptr;
  }
  return s;
}

// Runs s's queued work until `upto` items of it are done.
void drain(Stream& s, uint64_t upto) {
  std::lock_guard<std::recursive_mutex> lk(streams_mu());
  if (s.done >= upto || s.q.empty()) return;
  DeviceAccess access;  // once for the whole batch (each opening and closing is an mprotect of every block)
  while (s.done < upto && !s.q.empty()) {
    std::function<cudaError_t()> work = std::move(s.q.front());
    s.q.pop_front();
    struct Done {  // counted even if the work throws, so events after it still complete
      Stream& s;
      ~Done() { ++s.done; }
    } done{s};
    const cudaError_t e = work();
    if (e != cudaSuccess && g_async_error == cudaSuccess) g_async_error = e;
  }
}
void drain_all() {
  std::lock_guard<std::recursive_mutex> lk(streams_mu());
  drain(legacy_stream(), legacy_stream().queued);
  for (Stream* s : created_streams()) drain(*s, s->queued);
}
// What the legacy stream's synchronous calls wait for: the legacy stream and the blocking streams.
void drain_for_legacy() {
  std::lock_guard<std::recursive_mutex> lk(streams_mu());
  for (Stream* s : created_streams())
    if (s->live && s->blocking) drain(*s, s->queued);
  drain(legacy_stream(), legacy_stream().queued);
}
// The first unreported fault of queued work (then cleared), or cudaSuccess.
cudaError_t take_async_error() {
  std::lock_guard<std::recursive_mutex> lk(streams_mu());
  const cudaError_t e = g_async_error;
  g_async_error = cudaSuccess;
  if (e != cudaSuccess) t_last = e;
  return e;
}

void push(Stream& s, std::function<cudaError_t()> work) {
  s.q.push_back(std::move(work));
  ++s.queued;
}
// A queued wait: `other` done up to `pos`.
std::function<cudaError_t()> wait_for(Stream* other, uint64_t pos) {
  return [other, pos] {
    drain(*other, pos);
    return cudaSuccess;
  };
}

}  // namespace

}  // namespace twinkle_shim

struct CUevent_st {
  twinkle_shim::Stream* stream = nullptr;  // null: never recorded (complete)
  uint64_t pos = 0;                        // complete once stream->done >= pos
};

namespace twinkle_shim {

cudaError_t enqueue(cudaStream_t h, std::function<cudaError_t()> work) {
  std::lock_guard<std::recursive_mutex> lk(streams_mu());
  Stream* s = stream_of(h, "enqueue");
  if (!s) return cudaErrorInvalidResourceHandle;
  // the legacy stream's implicit synchronization with blocking streams, both ways
  Stream& leg = legacy_stream();
  if (s == &leg) {
    for (Stream* b : created_streams())
      if (b->live && b->blocking && b->queued > b->done) push(leg, wait_for(b, b->queued));
  } else if (s->blocking && leg.queued > leg.done) {
    push(*s, wait_for(&leg, leg.queued));
  }
  push(*s, std::move(work));
  if (eager()) drain(*s, s->queued);
  return cudaSuccess;
}

}  // namespace twinkle_shim

using twinkle_shim::fail;

// ---------------------------------------------------------------- runtime API
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "twinkle CUDA emulator (host fibers)");
  p->multiProcessorCount = 1;
  p->totalGlobalMem = twinkle_shim::heap().capacity();
  p->major = 9;
  p->minor = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) {
  if (dev != 0) return fail(cudaErrorInvalidValue, "cudaSetDevice(%d): the emulator has one device, 0", dev);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int dev) {
  if (dev != 0 || len <= 0) return fail(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId(device %d, %d B)", dev, len);
  std::snprintf(bus, static_cast<size_t>(len), "0000:00:00.0");  // every process: the same one device
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  twinkle_shim::drain_all();
  return twinkle_shim::take_async_error();
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::memset(a, 0, sizeof *a);
  const auto l = twinkle_shim::heap().lookup(p);
  if (p != nullptr && l.where == twinkle_shim::DeviceHeap::Where::Live) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}
// A destroyed stream's queued work still runs (CUDA: its resources are released once it completes): here at once.
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  if (!h) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(nullptr): the legacy stream");
  twinkle_shim::Stream* s = twinkle_shim::stream_of(h, "cudaStreamDestroy");
  if (!s) return cudaErrorInvalidResourceHandle;
  twinkle_shim::drain(*s, s->queued);
  s->live = false;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* h, unsigned flags) {
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  auto* s = new twinkle_shim::Stream();
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  twinkle_shim::created_streams().push_back(s);
  *h = s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  twinkle_shim::Stream* s = twinkle_shim::stream_of(h, "cudaStreamSynchronize");
  if (!s) return cudaErrorInvalidResourceHandle;
  twinkle_shim::drain(*s, s->queued);
  return twinkle_shim::take_async_error();
}
// Unfinished work answers cudaErrorNotReady once (the query runs it); like the CUDA runtime, the answer is also
// left as the thread's last error (cudaGetLastError returns and clears it).
cudaError_t cudaStreamQuery(cudaStream_t h) {
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  twinkle_shim::Stream* s = twinkle_shim::stream_of(h, "cudaStreamQuery");
  if (!s) return cudaErrorInvalidResourceHandle;
  if (s->done >= s->queued) return twinkle_shim::take_async_error();
  twinkle_shim::drain(*s, s->queued);
  twinkle_shim::t_last = cudaErrorNotReady;
  return cudaErrorNotReady;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  if (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming))
    return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags(0x%x): unknown flags", flags);
  *e = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(nullptr)");
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  delete e;  // queued waits hold the stream and position, not the event
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord(nullptr event)");
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  // an empty item, so the record takes the legacy stream's implicit synchronization like other work
  if (const cudaError_t r = twinkle_shim::enqueue(h, [] { return cudaSuccess; })) return r;
  twinkle_shim::Stream* s = twinkle_shim::stream_of(h, "cudaEventRecord");
  e->stream = s;
  e->pos = s->queued;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery(nullptr)");
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  if (!e->stream || e->stream->done >= e->pos) return twinkle_shim::take_async_error();
  twinkle_shim::drain(*e->stream, e->pos);
  twinkle_shim::t_last = cudaErrorNotReady;
  return cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(nullptr)");
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  if (e->stream) twinkle_shim::drain(*e->stream, e->pos);
  return twinkle_shim::take_async_error();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent(nullptr event)");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent(flags 0x%x): 0 expected", flags);
  std::lock_guard<std::recursive_mutex> lk(twinkle_shim::streams_mu());
  if (!twinkle_shim::stream_of(h, "cudaStreamWaitEvent")) return cudaErrorInvalidResourceHandle;
  if (!e->stream || e->stream->done >= e->pos) return cudaSuccess;  // complete already
  return twinkle_shim::enqueue(h, twinkle_shim::wait_for(e->stream, e->pos));
}
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = twinkle_shim::heap().alloc(n);
  if (!*p)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu B): the device heap (%zu MiB) is full", n,
                twinkle_shim::heap().capacity() >> 20);
  twinkle_shim::DeviceAccess access;
  std::memset(*p, 0x7F, n);  // fresh device memory is garbage (0x7F7F7F7F = 3.4e38 as a float)
  return cudaSuccess;
}
// As on a GPU, cudaFree waits for all queued work (which therefore never runs on freed memory).
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  twinkle_shim::drain_all();
  if (twinkle_shim::heap().free(p)) return cudaSuccess;
  return fail(cudaErrorInvalidValue, "cudaFree(%p): not the start of a live device allocation", p);
}

namespace {
const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
  }
  return "an unknown cudaMemcpyKind";
}

// Checks a copy's two sides against its kind; cudaSuccess or the recorded error.
cudaError_t check_copy(const char* call, void* d, const void* s, size_t n, cudaMemcpyKind k) {
  if (n == 0) return cudaSuccess;
  if (!d || !s) return fail(cudaErrorInvalidValue, "%s(%p, %p, %zu B): null pointer", call, d, s, n);
  const bool d_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
  const bool s_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
  if (k != cudaMemcpyHostToHost && !d_dev && !s_dev)
    return fail(cudaErrorInvalidValue, "%s: %s (%d)", call, kind_name(k), static_cast<int>(k));
  const std::string ed = d_dev ? twinkle_shim::device_range_error(d, n) : twinkle_shim::host_pointer_error(d);
  if (!ed.empty())
    return fail(cudaErrorInvalidValue, "%s(%zu B, %s): the destination %s", call, n, kind_name(k), ed.c_str());
  const std::string es = s_dev ? twinkle_shim::device_range_error(s, n) : twinkle_shim::host_pointer_error(s);
  if (!es.empty())
    return fail(cudaErrorInvalidValue, "%s(%zu B, %s): the source %s", call, n, kind_name(k), es.c_str());
  return cudaSuccess;
}
}  // namespace

namespace {
// The copy itself (the device side was checked when the call was made).
cudaError_t copy_now(void* d, const void* s, size_t n) {
  twinkle_shim::DeviceAccess access;
  std::memmove(d, s, n);
  return cudaSuccess;
}
}  // namespace

// On the legacy stream, as the CUDA runtime documents it for pageable memory: device to host waits for the
// legacy stream (not for non-blocking streams) and copies at once; host to device waits for the legacy
// stream, takes the source bytes and queues the copy there (the DMA may still be in flight when it returns:
// work on a non-blocking stream must not rely on it without a synchronize); device to device is queued.
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  if (const cudaError_t e = check_copy("cudaMemcpy", d, s, n, k)) return e;
  if (n == 0) return cudaSuccess;
  if (k == cudaMemcpyDeviceToDevice) return twinkle_shim::enqueue(nullptr, [d, s, n] { return copy_now(d, s, n); });
  if (k != cudaMemcpyHostToHost) {
    twinkle_shim::drain_for_legacy();
    if (const cudaError_t e = twinkle_shim::take_async_error()) return e;
  }
  if (k == cudaMemcpyHostToDevice) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(s), static_cast<const char*>(s) + n);
    return twinkle_shim::enqueue(nullptr, [d, staged] { return copy_now(d, staged->data(), staged->size()); });
  }
  return copy_now(d, s, n);
}
// Host to device: the source bytes are taken now (pageable memory is staged), the copy is queued; device to
// host (into pageable memory): waits for the stream, then copies; device to device: queued.
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
  if (const cudaError_t e = check_copy("cudaMemcpyAsync", d, s, n, k)) return e;
  if (n == 0) return cudaSuccess;
  if (k == cudaMemcpyHostToDevice) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(s), static_cast<const char*>(s) + n);
    return twinkle_shim::enqueue(st, [d, staged] { return copy_now(d, staged->data(), staged->size()); });
  }
  if (k == cudaMemcpyDeviceToDevice) return twinkle_shim::enqueue(st, [d, s, n] { return copy_now(d, s, n); });
  if (st == nullptr) {  // the legacy stream's copy also waits for the blocking streams
    twinkle_shim::drain_for_legacy();
    if (const cudaError_t e = twinkle_shim::take_async_error()) return e;
  } else if (const cudaError_t e = cudaStreamSynchronize(st)) {
    return e;
  }
  return copy_now(d, s, n);
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  if (const std::string e = twinkle_shim::device_range_error(p, n); !e.empty())
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync(%zu B): %s", n, e.c_str());
  return twinkle_shim::enqueue(st, [p, v, n] {
    twinkle_shim::DeviceAccess access;
    std::memset(p, v, n);
    return cudaSuccess;
  });
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (n == 0) return cudaSuccess;
  if (const std::string e = twinkle_shim::device_range_error(p, n); !e.empty())
    return fail(cudaErrorInvalidValue, "cudaMemset(%zu B): %s", n, e.c_str());
  return twinkle_shim::enqueue(nullptr, [p, v, n] {
    twinkle_shim::DeviceAccess access;
    std::memset(p, v, n);
    return cudaSuccess;
  });
}
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int v, size_t width, size_t height, cudaStream_t st) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch) return fail(cudaErrorInvalidValue, "cudaMemset2DAsync: width %zu B > pitch %zu B", width, pitch);
  if (const std::string e = twinkle_shim::device_range_error(p, pitch * (height - 1) + width); !e.empty())
    return fail(cudaErrorInvalidValue, "cudaMemset2DAsync(pitch %zu B, %zu x %zu B): %s", pitch, height, width,
                e.c_str());
  return twinkle_shim::enqueue(st, [p, pitch, v, width, height] {
    twinkle_shim::DeviceAccess access;
    for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, v, width);
    return cudaSuccess;
  });
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t st) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (kind != cudaMemcpyDeviceToDevice)
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: only cudaMemcpyDeviceToDevice is emulated");
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: width %zu B > pitch (dst %zu B, src %zu B)", width, dpitch,
                spitch);
  if (const std::string e = twinkle_shim::device_range_error(dst, dpitch * (height - 1) + width); !e.empty())
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync destination (%zu x %zu B): %s", height, width, e.c_str());
  if (const std::string e = twinkle_shim::device_range_error(src, spitch * (height - 1) + width); !e.empty())
    return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync source (%zu x %zu B): %s", height, width, e.c_str());
  return twinkle_shim::enqueue(st, [=] {
    twinkle_shim::DeviceAccess access;
    for (size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    return cudaSuccess;
  });
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = twinkle_shim::t_last;
  twinkle_shim::t_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  const char* text = "unknown error";
  switch (e) {
    case cudaSuccess: text = "no error"; break;
    case cudaErrorInvalidValue: text = "invalid argument"; break;
    case cudaErrorMemoryAllocation: text = "out of memory"; break;
    case cudaErrorInvalidConfiguration: text = "invalid configuration argument"; break;
    case cudaErrorInvalidResourceHandle: text = "invalid resource handle"; break;
    case cudaErrorNotReady: text = "device not ready"; break;
    case cudaErrorIllegalAddress: text = "an illegal memory access was encountered"; break;
    case cudaErrorLaunchFailure: text = "unspecified launch failure"; break;
  }
  if (e == cudaSuccess || e != twinkle_shim::t_detail_code) return text;
  thread_local std::string full;
  full = std::string(text) + " [cuda shim: " + twinkle_shim::t_detail + "]";
  return full.c_str();
}

// ---------------------------------------------------------------- cuBLAS (column-major, as the real one)
struct cublasContext {
  cudaStream_t stream = nullptr;  // cublasSetStream_v2; the legacy stream by default
};
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

namespace {
// A column-major rows x cols matrix of `elem`-byte elements with leading dimension ld must lie in one live
// device block.
bool blas_matrix_ok(const char* fn, const char* name, int pos, const void* p, size_t elem, int rows, int cols,
                    int ld) {
  if (rows <= 0 || cols <= 0) return true;
  const size_t elems = static_cast<size_t>(ld) * static_cast<size_t>(cols - 1) + static_cast<size_t>(rows);
  const std::string e = twinkle_shim::device_range_error(p, elems * elem);
  if (e.empty()) return true;
  twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s (argument %d, %d x %d, ld %d): %s", fn, name, pos,
                          rows, cols, ld, e.c_str());
  return false;
}
bool blas_scalar_ok(const char* fn, const char* name, int pos, const void* p) {
  const std::string e = p ? twinkle_shim::host_pointer_error(p) : std::string("null");
  if (e.empty()) return true;
  twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE,
                          "%s: %s (argument %d) under CUBLAS_POINTER_MODE_HOST must be a host pointer: %s", fn, name,
                          pos, e.c_str());
  return false;
}

// sum_p a[p] * b[p] in double: eight partial sums over p mod 8, then added in order (a fixed order, so
// every run gives the same bits; double keeps it closer to exact than cuBLAS's fp32 sums). Uninstrumented
// and optimized: the operands are the GEMM's own packed copies (the matrices were range-checked against
// the device heap before).
__attribute__((no_sanitize_address, optimize("O3"))) double dot_double(const float* a, const float* b, int k) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int p = 0;
  for (; p + 8 <= k; p += 8)
    for (int u = 0; u < 8; ++u) part[u] += static_cast<double>(a[p + u]) * b[p + u];
  for (; p < k; ++p) part[p % 8] += static_cast<double>(a[p]) * b[p];
  double s = 0.0;
  for (double v : part) s += v;
  return s;
}

// The column-major GEMM of cuBLAS with its argument checks (argument positions `pa`, `pb`, `pc`, `palpha`,
// `pbeta` as in the entry point's signature, from 1): C(i, j) = alpha * sum_p op(A)(i, p) op(B)(p, j) +
// beta * C(i, j), the sum in double (dot_double). op(A)'s rows and op(B)'s columns are first copied out
// contiguous in p as floats, so the dot products stream. The arguments are checked now, the product is
// queued on the handle's stream (alpha and beta read now: CUBLAS_POINTER_MODE_HOST).
void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float al, const void* A, bool a16,
              int lda, const void* B, bool b16, int ldb, float be, float* C, int ldc);

cublasStatus_t gemm_column_major(cublasHandle_t h, const char* fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 const float* alpha, const void* A, bool a16, int lda, const void* B, bool b16,
                                 int ldb, const float* beta, float* C, int ldc, int palpha, int pa, int pb,
                                 int pbeta, int pc) {
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: m %d n %d k %d with lda %d ldb %d ldc %d (op %d, %d)",
                                   fn, m, n, k, lda, ldb, ldc, ta, tb);
  if (!blas_scalar_ok(fn, "alpha", palpha, alpha) || !blas_scalar_ok(fn, "beta", pbeta, beta))
    return CUBLAS_STATUS_INVALID_VALUE;
  const size_t ea = a16 ? 2 : 4, eb = b16 ? 2 : 4;
  if (k > 0 && (!blas_matrix_ok(fn, "A", pa, A, ea, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda) ||
                !blas_matrix_ok(fn, "B", pb, B, eb, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!blas_matrix_ok(fn, "C", pc, C, sizeof(float), m, n, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *alpha, be = *beta;
  const cudaError_t queued = twinkle_shim::enqueue(h->stream, [=] {
    twinkle_shim::DeviceAccess access;
    gemm_run(ta, tb, m, n, k, al, A, a16, lda, B, b16, ldb, be, C, ldc);
    return cudaSuccess;
  });
  if (queued != cudaSuccess)
    return twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: the handle's stream is no live stream", fn);
  return CUBLAS_STATUS_SUCCESS;
}

// One operand element as float: fp32, or a bf16 bit pattern widened (exact); uninstrumented (the packing
// loops of gemm_run stream whole matrices that were range-checked against the device heap before).
template <bool kBf16>
__attribute__((no_sanitize_address, always_inline)) inline float load_element(const void* base, int64_t i) {
  if constexpr (!kBf16) {
    return static_cast<const float*>(base)[i];
  } else {
    const uint32_t u = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i]) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
}

// out[r * k + p] = M(r, p) for r < rows, p < k, where M(r, p) is the stored element at r * rstride + p * pstride:
// op(A)'s rows or op(B)'s columns copied out contiguous in p. The loop runs along the stored matrix's
// contiguous dimension.
template <bool kBf16>
__attribute__((no_sanitize_address, optimize("O3"))) void pack_rows(const void* M, int rows, int k, int64_t rstride,
                                                                     int64_t pstride, float* out) {
  if (rstride == 1) {
    for (int p = 0; p < k; ++p)
      for (int r = 0; r < rows; ++r)
        out[static_cast<size_t>(r) * k + p] = load_element<kBf16>(M, r + static_cast<int64_t>(p) * pstride);
  } else {
    for (int r = 0; r < rows; ++r)
      for (int p = 0; p < k; ++p)
        out[static_cast<size_t>(r) * k + p] = load_element<kBf16>(M, static_cast<int64_t>(r) * rstride + p);
  }
}

// The dot products of 4 packed rows of op(A) with 4 packed columns of op(B): for each of the 16 pairs exactly
// dot_double's arithmetic (eight partial sums over p mod 8 in increasing p, each product exact in double,
// then the partials added in order), so the result has the same bits as 16 dot_double calls; the block only
// reuses each loaded operand four times.
__attribute__((no_sanitize_address, optimize("O3"))) void dot_block_4x4(const float* a, const float* b, int k,
                                                                        double out[4][4]) {
  double part[4][4][8] = {};
  int p = 0;
  for (; p + 8 <= k; p += 8)
    for (int ii = 0; ii < 4; ++ii)
      for (int jj = 0; jj < 4; ++jj)
        for (int u = 0; u < 8; ++u)
          part[ii][jj][u] += static_cast<double>(a[static_cast<size_t>(ii) * k + p + u]) *
                             b[static_cast<size_t>(jj) * k + p + u];
  for (; p < k; ++p)
    for (int ii = 0; ii < 4; ++ii)
      for (int jj = 0; jj < 4; ++jj)
        part[ii][jj][p % 8] += static_cast<double>(a[static_cast<size_t>(ii) * k + p]) * b[static_cast<size_t>(jj) * k + p];
  for (int ii = 0; ii < 4; ++ii)
    for (int jj = 0; jj < 4; ++jj) {
      double s = 0.0;
      for (double v : part[ii][jj]) s += v;
      out[ii][jj] = s;
    }
}

// C = al * op(A) op(B) + be * C, column-major, accumulated in double (device memory readable: call inside queued
// work). op(A)'s rows and op(B)'s columns are packed contiguous in p, then 4 x 4 blocks of C come from
// dot_block_4x4 and the edges from dot_double (the same sums either way).
__attribute__((no_sanitize_address, optimize("O3"))) void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m,
                                                                    int n, int k, float al, const void* A, bool a16,
                                                                    int lda, const void* B, bool b16, int ldb, float be,
                                                                    float* C, int ldc) {
  std::vector<float> ar(static_cast<size_t>(m) * k), bc(static_cast<size_t>(n) * k);
  // op(A)(i, p) = A[i + p lda] (N) or A[p + i lda] (T); op(B)(p, j) = B[p + j ldb] (N) or B[j + p ldb] (T)
  const int64_t ars = ta == CUBLAS_OP_N ? 1 : lda, aps = ta == CUBLAS_OP_N ? lda : 1;
  const int64_t brs = tb == CUBLAS_OP_N ? ldb : 1, bps = tb == CUBLAS_OP_N ? 1 : ldb;
  (a16 ? pack_rows<true> : pack_rows<false>)(A, m, k, ars, aps, ar.data());
  (b16 ? pack_rows<true> : pack_rows<false>)(B, n, k, brs, bps, bc.data());
  const auto store = [&](int i, int j, double s) {
    float& c = C[i + static_cast<int64_t>(j) * ldc];
    c = static_cast<float>(al * s + (be == 0.0f ? 0.0 : static_cast<double>(be) * c));
  };
  const int m4 = m - m % 4, n4 = n - n % 4;
  double blk[4][4];
  for (int j = 0; j < n4; j += 4)
    for (int i = 0; i < m4; i += 4) {
      dot_block_4x4(ar.data() + static_cast<size_t>(i) * k, bc.data() + static_cast<size_t>(j) * k, k, blk);
      for (int jj = 0; jj < 4; ++jj)
        for (int ii = 0; ii < 4; ++ii) store(i + ii, j + jj, blk[ii][jj]);
    }
  for (int j = 0; j < n; ++j)
    for (int i = (j < n4 ? m4 : 0); i < m; ++i)
      store(i, j, dot_double(ar.data() + static_cast<size_t>(i) * k, bc.data() + static_cast<size_t>(j) * k, k));
}
}  // namespace

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  return gemm_column_major(h, "cublasSgemm", ta, tb, m, n, k, alpha, A, false, lda, B, false, ldb, beta, C, ldc, 7, 8,
                           10, 12, 13);
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  const auto input = [](cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; };
  if (!input(Atype) || !input(Btype) || Atype != Btype || Ctype != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC))
    return twinkle_shim::blas_fail(CUBLAS_STATUS_NOT_SUPPORTED,
                                   "cublasGemmEx: types A %d B %d C %d compute %d (the shim has A = B in "
                                   "CUDA_R_32F or CUDA_R_16BF, C CUDA_R_32F, CUBLAS_COMPUTE_32F)",
                                   Atype, Btype, Ctype, compute);
  return gemm_column_major(h, "cublasGemmEx", ta, tb, m, n, k, static_cast<const float*>(alpha), A,
                           Atype == CUDA_R_16BF, lda, B, Btype == CUDA_R_16BF, ldb, static_cast<const float*>(beta),
                           static_cast<float*>(C), ldc, 7, 8, 11, 14, 15);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch) {
  for (int i = 0; i < batch; ++i) {
    const cublasStatus_t s =
        cublasSgemm_v2(h, ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemmGroupedBatched(cublasHandle_t h, const cublasOperation_t transa_array[],
                                         const cublasOperation_t transb_array[], const int m_array[],
                                         const int n_array[], const int k_array[], const float alpha_array[],
                                         const float* const Aarray[], const int lda_array[],
                                         const float* const Barray[], const int ldb_array[],
                                         const float beta_array[], float* const Carray[], const int ldc_array[],
                                         int group_count, const int group_size[]) {
  const char* fn = "cublasSgemmGroupedBatched";
  if (group_count < 0) return twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: group_count %d", fn, group_count);
  // The problem descriptors are host arrays (read at the call); the matrix pointer arrays are read by the
  // device, so they must be device memory and are read when the work runs.
  struct Group {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc, size;
    float alpha, beta;
  };
  std::vector<Group> gs;
  size_t total = 0;
  for (int g = 0; g < group_count; ++g) {
    const Group x{transa_array[g], transb_array[g], m_array[g], n_array[g], k_array[g], lda_array[g], ldb_array[g],
                  ldc_array[g], group_size[g], alpha_array[g], beta_array[g]};
    if (x.size < 0 || x.m < 0 || x.n < 0 || x.k < 0 || x.lda < std::max(1, x.ta == CUBLAS_OP_N ? x.m : x.k) ||
        x.ldb < std::max(1, x.tb == CUBLAS_OP_N ? x.k : x.n) || x.ldc < std::max(1, x.m))
      return twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE,
                                     "%s: group %d: size %d m %d n %d k %d with lda %d ldb %d ldc %d", fn, g, x.size,
                                     x.m, x.n, x.k, x.lda, x.ldb, x.ldc);
    gs.push_back(x);
    total += static_cast<size_t>(x.size);
  }
  if (total == 0) return CUBLAS_STATUS_SUCCESS;
  const void* arrays[3] = {Aarray, Barray, Carray};
  const char* names[3] = {"Aarray", "Barray", "Carray"};
  for (int i = 0; i < 3; ++i)
    if (const std::string e = twinkle_shim::device_range_error(arrays[i], total * sizeof(void*)); !e.empty())
      return twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s (read by the device): %s", fn, names[i],
                                     e.c_str());
  const cudaError_t queued = twinkle_shim::enqueue(h->stream, [=]() -> cudaError_t {
    twinkle_shim::DeviceAccess access;
    size_t idx = 0;
    for (const Group& x : gs)
      for (int i = 0; i < x.size; ++i, ++idx) {
        const float* A = Aarray[idx];
        const float* B = Barray[idx];
        float* C = Carray[idx];
        const auto extent = [](int rows, int cols, int ld) {
          return cols > 0 && rows > 0 ? (static_cast<size_t>(cols - 1) * ld + rows) * sizeof(float) : 0;
        };
        const size_t ea = extent(x.ta == CUBLAS_OP_N ? x.m : x.k, x.ta == CUBLAS_OP_N ? x.k : x.m, x.lda);
        const size_t eb = extent(x.tb == CUBLAS_OP_N ? x.k : x.n, x.tb == CUBLAS_OP_N ? x.n : x.k, x.ldb);
        if ((x.k > 0 && (!twinkle_shim::device_range_error(A, ea).empty() ||
                         !twinkle_shim::device_range_error(B, eb).empty())) ||
            !twinkle_shim::device_range_error(C, extent(x.m, x.n, x.ldc)).empty()) {
          std::fprintf(stderr, "twinkle cuda shim: %s: problem %zu reads or writes outside live device memory\n", fn,
                       idx);
          return cudaErrorIllegalAddress;
        }
        gemm_run(x.ta, x.tb, x.m, x.n, x.k, x.alpha, A, false, x.lda, B, false, x.ldb, x.beta, C, x.ldc);
      }
    return cudaSuccess;
  });
  if (queued != cudaSuccess)
    return twinkle_shim::blas_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: the handle's stream is no live stream", fn);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t s) {
  const char* text = s == CUBLAS_STATUS_SUCCESS         ? "CUBLAS_STATUS_SUCCESS"
                     : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
                                                        : "CUBLAS_STATUS_INVALID_VALUE";
  if (s == CUBLAS_STATUS_SUCCESS || s != twinkle_shim::t_blas_detail_code) return text;
  thread_local std::string full;
  full = std::string(text) + " [cuda shim: " + twinkle_shim::t_blas_detail + "]";
  return full.c_str();
}
