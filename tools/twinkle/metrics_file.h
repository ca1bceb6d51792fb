// tools/twinkle/metrics_file.h — opening `twinkle train --metrics-file` for a new or a resumed run.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace twinkle::cli {

/// Opens `path` (rank 0's file of one JSON object per step: {"step": N, "loss": ...}) for the
/// run's lines, creating its parent directories.
///  * resumed_step 0 (a new run): the file is truncated — one run per file.
///  * resumed_step S > 0 (`--resume` from a checkpoint of step S): the lines of steps 1..S already
///    in the file are kept, in file order, and the later ones dropped (the steps after the
///    checkpoint, which the resumed run trains again), so the file ends as one run's curve; the
///    checkpoint's history is what HF Trainer's resume keeps too (trainer_state.json log_history up
///    to its global_step). A line that is not a JSON object with an integer "step" (e.g. cut off
///    when the earlier run was killed) is dropped. A missing file starts empty. The kept lines are
///    written to path + ".tmp" and renamed over the file (a process killed meanwhile leaves the old
///    file or the new one, never a truncated one; nothing is fsync'ed, so a machine crash may not).
/// `kept` (optional) receives the number of lines kept. Throws twinkle::Error naming the file when
/// its directory cannot be made, it cannot be read, replaced or opened for writing.
std::ofstream open_metrics_file(const std::string& path, int64_t resumed_step, int64_t* kept = nullptr);

}  // namespace twinkle::cli
