// twinkle/model/parameter.h — moved: Param, ShardSpec and ParamStore live in the parallel
// layer now (twinkle/parallel/param_store.h), below the tensor-parallel layer types that
// own them. This header only forwards, for code written against the old path.
#pragma once
#include "twinkle/parallel/param_store.h"
