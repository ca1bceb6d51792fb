// twinkle/runtime/runtime.h — convenience include: the runtime API lives in
// twinkle/dist/runtime.h (initialize, parallel_state, run_main, get_logger,
// get_device_placement), built into twinkle_dist.
#pragma once
#include "twinkle/dist/runtime.h"
