// Kernel registry: (op, device, implementation) -> op struct; KernelTable resolution.
#include "twinkle/kernels/registry.h"

#include <algorithm>

#include "twinkle/core/error.h"

#ifdef TWINKLE_CUDA_BUILT
#include "twinkle/kernels/cuda/kernels.h"
#include "twinkle/kernels/cuda/runtime.h"
#endif

namespace twinkle::kernels {

namespace {

template <size_t... I>
std::vector<std::string> names_of(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, OpImpl>::kName...};
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

}  // namespace

const char* op_name(const OpImpl& impl) {
  return std::visit([](const auto& op) { return std::decay_t<decltype(op)>::kName; }, impl);
}

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = names_of(std::make_index_sequence<std::variant_size_v<OpImpl>>{});
  return names;
}

void KernelTable::set(const std::string& impl_name, const OpImpl& impl) {
  std::visit(
      [&](const auto& op) {
        using T = std::decay_t<decltype(op)>;
#define TWINKLE_OP_SET(type, field) \
  if constexpr (std::is_same_v<T, type>) field = op;
        TWINKLE_KERNEL_OPS(TWINKLE_OP_SET)
#undef TWINKLE_OP_SET
        impl_names[T::kName] = impl_name;
      },
      impl);
}

std::string KernelTable::impl(const std::string& op) const {
  auto it = impl_names.find(op);
  return it == impl_names.end() ? std::string() : it->second;
}

Registry& Registry::global() {
  static Registry* r = [] {
    auto* reg = new Registry();  // never destroyed: usable from other static destructors
    cpu::register_reference_kernels(*reg);
    cpu::register_fused_kernels(*reg);
    cpu::register_bf16_kernels(*reg);
#ifdef TWINKLE_CUDA_BUILT
    for (const OpImpl& op : cuda::fused_kernels()) reg->add("cuda", "fused", op);  // no GPU touched here
    for (const OpImpl& op : cuda::bf16_kernels()) reg->add("cuda", "bf16", op);
#endif
    return reg;
  }();
  return *r;
}

void Registry::add(const std::string& device, const std::string& name, const OpImpl& impl) {
  check(!device.empty() && !name.empty(),
        std::string("kernel registry: op '") + op_name(impl) + "' registered with an empty device or name");
  std::lock_guard<std::mutex> lk(mu_);
  impls_[op_name(impl)][device].insert_or_assign(name, impl);
}

bool Registry::remove(const std::string& op, const std::string& device, const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  auto o = impls_.find(op);
  if (o == impls_.end()) return false;
  auto d = o->second.find(device);
  return d != o->second.end() && d->second.erase(name) > 0;
}

OpImpl Registry::get(const std::string& op, const std::string& device, const std::string& name) const {
  check(std::find(op_names().begin(), op_names().end(), op) != op_names().end(),
        "kernel registry: unknown op '" + op + "' (ops: " + join(op_names()) + ")");
  std::lock_guard<std::mutex> lk(mu_);
  auto o = impls_.find(op);
  if (o != impls_.end()) {
    auto d = o->second.find(device);
    if (d != o->second.end()) {
      auto n = d->second.find(name);
      if (n != d->second.end()) return n->second;
    }
  }
  std::vector<std::string> have;
  if (o != impls_.end())
    if (auto d = o->second.find(device); d != o->second.end())
      for (const auto& [n, _] : d->second) have.push_back(n);
  throw Error("kernel registry: op '" + op + "' has no implementation '" + name + "' on device '" + device +
              "' (registered: " + join(have) + ")");
}

std::vector<std::string> Registry::implementations(const std::string& op, const std::string& device) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> out;
  if (auto o = impls_.find(op); o != impls_.end())
    if (auto d = o->second.find(device); d != o->second.end())
      for (const auto& [n, _] : d->second) out.push_back(n);
  return out;
}

std::vector<std::string> Registry::devices() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> out;
  for (const auto& [op, devs] : impls_)
    for (const auto& [d, names] : devs)
      if (!names.empty() && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  std::sort(out.begin(), out.end());
  return out;
}

void check_device(const std::string& device) {
  if (device == "npu")
    throw Error("kernels: device 'npu' has no kernels in this build: the NPU backend needs Huawei Ascend's CANN "
                "toolkit (aclnn / torch_npu fused operators), which is not available here");
  if (device == "cuda") {
#ifdef TWINKLE_CUDA_BUILT
    cuda::init();  // throws "device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=...)" without a GPU
#else
    throw Error("kernels: device 'cuda' has no kernels in this build: the CUDA backend is not built (configure "
                "with -DTWINKLE_CUDA=ON where nvcc exists)");
#endif
  }
  const auto devs = Registry::global().devices();
  check(std::find(devs.begin(), devs.end(), device) != devs.end(),
        "kernels: device '" + device + "' is unknown (devices with kernels: " + join(devs) + ")");
}

void check_kernel_set(const std::string& set) {
  check(set == "fused" || set == "reference",
        "kernels: unknown kernel set '" + set + "' (option kernels / --kernels: fused or reference)");
}

KernelTable resolve_kernels(const std::string& device, const std::string& set, const KernelMapping& mapping) {
  check_device(device);
  check_kernel_set(set);
  Registry& reg = Registry::global();
  KernelTable t;
  t.device = device;
  for (const auto& op : op_names()) t.set(set, reg.get(op, device, set));
  for (const auto& [op, per_device] : mapping) {
    check(std::find(op_names().begin(), op_names().end(), op) != op_names().end(),
          "kernelize mapping: unknown op '" + op + "' (ops: " + join(op_names()) + ")");
    if (auto it = per_device.find(device); it != per_device.end()) t.set(it->second, reg.get(op, device, it->second));
  }
  return t;
}

const std::vector<std::string>& mixed_precision_ops() {
  static const std::vector<std::string> ops = {"linear", "gate_up_swiglu", "linear_cross_entropy", "grouped_linear",
                                               "attention", "attention_block"};
  return ops;
}

const std::vector<std::string>& cpu_only_ops() {
  static const std::vector<std::string> ops = {"causal_conv1d", "gated_delta_rule", "gated_rms_norm"};
  return ops;
}

void check_mixed_precision(const std::string& mp) {
  check(mp == "fp32" || mp == "bf16",
        "mixed_precision: unknown value '" + mp + "' (option mixed_precision / --bf16 / --fp32: fp32 or bf16)");
}

void check_mixed_precision_on(const std::string& device, const std::string& mp) {
  check_mixed_precision(mp);
  if (mp == "fp32") return;
  // a device this build lacks (npu, cuda without the backend) says so first, not that an op lacks bf16
  if (!device_built(device)) check_device(device);
  const Registry& reg = Registry::global();
  for (const auto& op : mixed_precision_ops()) {
    const auto impls = reg.implementations(op, device);
    check(std::find(impls.begin(), impls.end(), "bf16") != impls.end(),
          "mixed_precision 'bf16' (--bf16) is not implemented on device '" + device + "' (op '" + op +
              "' has no bf16 implementation there): use fp32 (--fp32 on the command line, mixed_precision='no' "
              "in Python)");
  }
}

void apply_mixed_precision(KernelTable& t, const std::string& mp) {
  check_mixed_precision(mp);
  if (mp == "fp32") return;
  check_mixed_precision_on(t.device, mp);
  for (const auto& op : mixed_precision_ops()) t.set("bf16", Registry::global().get(op, t.device, "bf16"));
}

bool device_built(const std::string& device) {
#ifdef TWINKLE_CUDA_BUILT
  if (device == "cuda") return true;
#endif
  return device == "cpu";
}

AcceleratorPeak accelerator_peak(const std::string& device, bool bf16) {
  AcceleratorPeak a;
#ifdef TWINKLE_CUDA_BUILT
  if (device == "cuda" && cuda::initialized()) {
    a.ordinal = cuda::current_device();
    for (const cuda::DeviceInfo& d : cuda::device_info())
      if (d.ordinal == a.ordinal) {
        a.name = d.name;
        a.pci_bus_id = d.pci_bus_id;
        a.flops = (bf16 ? d.peak_bf16_tflops : d.peak_fp32_tflops) * 1e12;
      }
  }
#else
  (void)device;
  (void)bf16;
#endif
  return a;
}

const KernelTable& default_cpu_kernels() {
  static const KernelTable t = resolve_kernels("cpu", "fused");
  return t;
}

}  // namespace twinkle::kernels
