// Peak resident set of the training steps, shared by the benches (train_bench, layout_bench):
// twinkle/core/peak_rss.h under the names the benches use.
#pragma once

#include "twinkle/core/peak_rss.h"

namespace twinkle::benchutil {

using twinkle::reset_peak_rss;
using twinkle::step_peak_rss_bytes;

}  // namespace twinkle::benchutil
