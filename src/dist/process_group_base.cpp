// Default implementations of optional ProcessGroup operations.
#include "twinkle/core/error.h"
#include "twinkle/dist/process_group.h"

namespace twinkle::dist {

void ProcessGroup::send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count,
                             int src, DType dtype, int tag) {
  // Fallback: correct only when the two peers cannot both block (e.g. eager-size messages).
  if (send_count > 0 && recv_count > 0 && rank() % 2 == 1) {
    recv(recv_buf, recv_count, dtype, src, tag);
    send(send_buf, send_count, dtype, dest, tag);
    return;
  }
  if (send_count > 0) send(send_buf, send_count, dtype, dest, tag);
  if (recv_count > 0) recv(recv_buf, recv_count, dtype, src, tag);
}

}  // namespace twinkle::dist
