// twinkle/kernels/registry.h — named kernel implementations per device, and the resolved table a model
// calls (the seam where Twinkle's kernelize_model swaps kernels; twinkle.kernel, src/twinkle/kernel/).
//
// The registry maps (op, device, implementation name) to an op struct of twinkle/kernels/ops.h.
// Built in, device "cpu":
//   "reference" — plain loops with double accumulation, unfused (src/kernels/cpu/reference/): the
//                 implementation the others are debugged against, slow.
//   "fused"     — the optimized kernels of src/kernels/cpu (oneDNN GEMM, flash attention, AVX-512
//                 element-wise) plus the fusions add_rms_norm, qk_norm_rope, gate_up_swiglu and
//                 linear_cross_entropy. The default.
//   "bf16"      — only the GEMM ops and attention (mixed_precision_ops()): bf16 inputs, fp32
//                 accumulation (twinkle/kernels/cpu/bf16_ops.h; attention and ring attention's
//                 block op: fp32 forward, bf16 backward, attention_bf16.h, attention_block.h); laid
//                 over a table by apply_mixed_precision.
// Device "cuda" (a CUDA build, twinkle/kernels/cuda/kernels.h): "fused" — the CUDA kernels, cuBLAS
// GEMMs; resolving a table for it initializes the CUDA runtime (and throws without a GPU). Without the
// CUDA build, and for "npu" always, resolving a table throws at once (check_device). A user registers an own kernel with Registry::global().add(...) and selects it
// through a KernelMapping (see twinkle/model/kernelize.h).
#pragma once
#include <map>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "twinkle/kernels/ops.h"

namespace twinkle::kernels {

namespace detail {
template <class First, class... Ops>
struct variant_of_ops {
  using type = std::variant<Ops...>;
};
}  // namespace detail

/// Any one op's implementation: a variant over the ops of TWINKLE_KERNEL_OPS (twinkle/kernels/ops.h).
#define TWINKLE_OP_COMMA_TYPE(type, field) , type
using OpImpl = detail::variant_of_ops<void TWINKLE_KERNEL_OPS(TWINKLE_OP_COMMA_TYPE)>::type;
#undef TWINKLE_OP_COMMA_TYPE

/// Registry name of the op an implementation belongs to ("rms_norm", ...).
const char* op_name(const OpImpl& impl);
/// Every op name, in the order of OpImpl.
const std::vector<std::string>& op_names();

/// {op -> {device -> implementation}}: Twinkle's kernelize_model mapping.
using KernelMapping = std::map<std::string, std::map<std::string, std::string>>;

/// One resolved implementation per op, for one device: what a model calls.
struct KernelTable {
  std::string device = "cpu";
  /// One field per op, named as in TWINKLE_KERNEL_OPS (embedding, rms_norm, ..., moe_router_loss).
#define TWINKLE_OP_FIELD(type, field) type field{};
  TWINKLE_KERNEL_OPS(TWINKLE_OP_FIELD)
#undef TWINKLE_OP_FIELD
  /// op -> implementation name in use.
  std::map<std::string, std::string> impl_names;

  /// Puts impl into its op's slot, recording its name.
  void set(const std::string& impl_name, const OpImpl& impl);
  /// Implementation name in use for op ("" when unset).
  std::string impl(const std::string& op) const;
  /// True when every op has an implementation.
  bool complete() const { return impl_names.size() == op_names().size(); }
};

class Registry {
 public:
  /// The process-wide registry, with the built-in CPU sets registered on first use. Thread-safe.
  static Registry& global();

  /// Registers impl for its op under (device, name), replacing an earlier one with the same key.
  /// Throws twinkle::Error if device or name is empty.
  void add(const std::string& device, const std::string& name, const OpImpl& impl);
  /// Removes (op, device, name); returns whether it existed.
  bool remove(const std::string& op, const std::string& device, const std::string& name);
  /// The implementation, or throws twinkle::Error naming op, device, name and the names registered.
  OpImpl get(const std::string& op, const std::string& device, const std::string& name) const;
  /// Implementation names registered for (op, device), sorted.
  std::vector<std::string> implementations(const std::string& op, const std::string& device) const;
  /// Devices with at least one implementation, sorted.
  std::vector<std::string> devices() const;

 private:
  Registry() = default;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, std::map<std::string, OpImpl>>> impls_;  // op -> device -> name
};

/// Throws twinkle::Error unless `device` has kernels in this build: "npu" (needs Huawei Ascend's CANN
/// toolkit and the NPU backend), "cuda" (the CUDA backend is not built; in a CUDA build it calls
/// twinkle::cuda::init(), which throws "device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=...)"
/// without a GPU), anything else unknown.
void check_device(const std::string& device);

/// Whether this build has the backend of `device` compiled in ("cpu" always, "cuda" in a
/// -DTWINKLE_CUDA build; no GPU needed). Does not initialize anything.
bool device_built(const std::string& device);

/// Names of the built-in sets: "fused" (default) and "reference". Throws twinkle::Error naming the
/// option for any other value.
void check_kernel_set(const std::string& set);

/// Ops whose implementation the mixed precision "bf16" replaces: linear, gate_up_swiglu,
/// linear_cross_entropy, grouped_linear (every GEMM of the step), and the backward of attention and
/// attention_block (their tile products).
const std::vector<std::string>& mixed_precision_ops();

/// Ops whose only kernels are the CPU sets (the Gated DeltaNet ops: causal_conv1d, gated_delta_rule,
/// gated_rms_norm). Device "cuda" registers for each an implementation whose every function throws
/// twinkle::Error "kernels: op 'NAME' has no CUDA implementation ..." before touching its arguments, so a
/// cuda table still resolves and the first call of such an op refuses by name.
const std::vector<std::string>& cpu_only_ops();

/// Throws twinkle::Error naming the option unless mp is "fp32" or "bf16".
void check_mixed_precision(const std::string& mp);

/// Throws twinkle::Error unless mixed precision `mp` is available on `device`: check_mixed_precision,
/// then, for a device this build lacks, check_device's error (npu: CANN; cuda: not built), then "bf16" only where the registry holds a "bf16" implementation of every mixed_precision_ops() op
/// for the device ("cpu"; "cuda" in a CUDA build: twinkle/kernels/cuda/kernels.h bf16_kernels). The
/// message names the missing op and the way out for each front end: --fp32 on the command line,
/// mixed_precision='no' in Python.
void check_mixed_precision_on(const std::string& device, const std::string& mp);

/// Lays mixed precision `mp` over a resolved table: "fp32" leaves it; "bf16" puts the table device's
/// "bf16" implementations (CPU: twinkle/kernels/cpu/bf16_ops.h: bf16 GEMM inputs, fp32 accumulation and
/// outputs; attention_bf16.h: the attention backward's tile products in bf16; CUDA: the same rounding
/// points, twinkle/kernels/cuda/kernels.h) into the mixed_precision_ops() slots, every other op stays
/// (fp32 norms, softmax, the attention forward, cross entropy, AdamW). Throws twinkle::Error for an
/// unknown mp (check_mixed_precision) and where check_mixed_precision_on refuses.
void apply_mixed_precision(KernelTable& t, const std::string& mp);

/// Resolves a table for device: every op from the implementation named `set`, then the mapping's
/// entries for this device (mapping entries for other devices are ignored, as in Twinkle). Throws
/// twinkle::Error (check_device; an unknown op in the mapping; an unregistered implementation).
KernelTable resolve_kernels(const std::string& device, const std::string& set = "fused",
                            const KernelMapping& mapping = {});

/// The CPU "fused" table, resolved once (for code that was given no table).
const KernelTable& default_cpu_kernels();

/// The accelerator this process computes on for `device`: its name, ordinal among the visible devices and
/// datasheet peak in FLOP/s (dense bf16 tensor-core with bf16, else fp32: twinkle::cuda::peak_tflops_for).
/// cuda: the initialised backend's current device; flops 0 for a name the table lacks (the host emulation
/// among them). Empty (ordinal -1, flops 0) for "cpu" (its peak is measured: twinkle/train/mfu.h), a
/// device this build lacks, or cuda before twinkle::cuda::init(). Never throws.
struct AcceleratorPeak {
  std::string name;
  int ordinal = -1;
  double flops = 0;
  std::string pci_bus_id;  ///< the physical device (ranks with their own CUDA_VISIBLE_DEVICES all see ordinal 0)
};
AcceleratorPeak accelerator_peak(const std::string& device, bool bf16);

namespace cpu {
/// Registers the built-in CPU implementations (called by Registry::global()).
void register_reference_kernels(Registry& r);
void register_fused_kernels(Registry& r);
void register_bf16_kernels(Registry& r);
}  // namespace cpu

}  // namespace twinkle::kernels
