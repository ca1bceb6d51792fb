// libFuzzer target: arbitrary bytes parsed as a config.json (through a memfd path, since
// load_model_config reads files). Accepted configs must validate and survive to_json /
// re-serialization; rejections must be twinkle::Error.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "twinkle/io/model_config.h"

using namespace twinkle;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = memfd_create("fuzz_config", 0);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    ModelConfig c = load_model_config(path);
    c.validate();
    nlohmann::json j = to_json(c);
    (void)j.dump(2);
    (void)c.is_moe_layer(0);
  } catch (const Error&) {
  }
  return 0;
}
