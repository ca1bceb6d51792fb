// Dataset::set_template lives in its own object file so that programs that never call it
// (tests with a fake encoder) do not need the Template implementation at link time.
#include "twinkle/data/dataset.h"

namespace twinkle {

void Dataset::set_template(const std::string& name, const TemplateOptions& opts) {
  auto t = std::make_shared<const Template>(name, opts);
  encoder_ = [t](const std::vector<Message>& messages, const std::string& row_name) {
    return t->encode(messages, row_name);
  };
  template_ = std::move(t);
  encoded_.reset();
}

}  // namespace twinkle
