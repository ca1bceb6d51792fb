// twinkle-run — torchrun-style launcher over OpenMPI's mpirun.
//
//   twinkle-run --nproc_per_node=N [--nnodes=M --node_rank=K --hostfile=F [--rsh-agent=CMD]
//               [--iface=IF] --master_addr=A --master_port=P] [--max-restarts=R] [--comm-timeout=S]
//               [--dry-run] PROGRAM ARGS...
//
// Options accept both "--x=v" and "--x v" (and '-' for '_': --nproc-per-node). Parsing
// stops at the first argument that is not an option (or after "--"); everything from
// PROGRAM on is passed to the ranks untouched. It execs (execvp) mpirun with:
//   -np N*M                         (multi-node: --hostfile F --map-by ppr:N:node)
//   --oversubscribe                 when N exceeds this node's cores
//   --bind-to none                  so a rank's OpenMP threads may use every core
//   --mca mpi_yield_when_idle 1     waiting ranks yield instead of busy polling
//   --mca orte_abort_on_non_zero_status 1   a rank that fails or dies (even SIGKILL)
//                                   takes the whole job down (OpenMPI's default, made explicit)
//   --allow-run-as-root             when run by root
//   -x OMP_NUM_THREADS=T            T = max(1, cores / N) (1 when oversubscribed) unless
//                                   the user set OMP_NUM_THREADS (then forwarded as is)
//   -x OMP_WAIT_POLICY=passive      (unless set by the user)
//   -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736
//                                   glibc keeps freed memory: removes the page-fault cliff of
//                                   large messages (bench/README.md, MALLOC_MMAP_MAX_)
//   -x LOG_LEVEL, -x TWINKLE_*, -x CUDA_VISIBLE_DEVICES, -x ASCEND_RT_VISIBLE_DEVICES
//                                   forwarded when set. Device mapping is done by the runtime
//                                   (twinkle::local_device_id): local rank i
//                                   (OMPI_COMM_WORLD_LOCAL_RANK) uses entry i of the list, or
//                                   device i when the variable is unset.
//   -x TWINKLE_MASTER_ADDR / TWINKLE_MASTER_PORT   when given (informational: MPI does its
//                                   own wire-up; torchrun scripts may pass them unchanged)
// Python programs: a PROGRAM ending in ".py" runs under the interpreter the Python package was
// built for ($TWINKLE_PYTHON, else the build's: the project environment's .venv/bin/python), with the built package
// (build/python) put in front of PYTHONPATH and forwarded (-x PYTHONPATH):
//   twinkle-run --nproc_per_node=8 examples/python/tp.py
// Other options: --dry-run prints the command (one shell-quoted line) instead of running it;
// --mpirun=PATH (or env TWINKLE_MPIRUN) picks the mpirun binary; --mpi-arg=ARG (repeatable)
// appends ARG to mpirun's options. Exit status: mpirun's (127 when it cannot be started,
// 2 for a bad command line).
//
// Multi-node: MPI starts the whole job from one node. Run twinkle-run on node_rank 0 with
// --nnodes=M --hostfile=F (one line per node, "host slots=N"); on other node ranks it
// prints a note and exits 0, so a torchrun-style script run on every node still works.
// mpirun starts the other nodes' daemons over ssh; --rsh-agent=CMD (env TWINKLE_RSH_AGENT) names
// another remote shell (`--mca plm_rsh_agent CMD`, called as "CMD HOST COMMAND..."), and
// --iface=IF[,IF...] (env TWINKLE_NET_IFACE) the network interfaces MPI's TCP traffic and its
// daemons' out-of-band channel use (`--mca btl_tcp_if_include IF --mca oob_tcp_if_include IF`),
// as torchrun users pass --rdzv-endpoint. With --nnodes > 1 the daemons' connections send TCP
// keepalives (--mca oob_tcp_keepalive_time 10 / _intvl 2 / _probes 3), so a node whose link
// dies is declared lost by mpirun within ~20 s and the job ends instead of hanging.
//
// Fault tolerance (torchrun's elastic restart): --max-restarts=R (default 0) runs mpirun as a
// child instead of exec'ing it; when the job fails (a rank died or aborted, non-zero status) it is
// started again, up to R times, with TWINKLE_RESTART_COUNT=k (0 on the first attempt, forwarded to
// the ranks, like TORCHELASTIC_RESTART_COUNT). The program resumes by itself: the recipes and
// `twinkle train` take --resume auto (the newest complete checkpoint in the output directory, or a
// fresh start when there is none). After R failed restarts twinkle-run stops with the last exit
// status and says so. SIGINT / SIGTERM are passed to the running mpirun and end the loop.
// --comm-timeout=S (env TWINKLE_COMM_TIMEOUT, forwarded) sets the collective watchdog of every
// rank (twinkle/dist/comm_watchdog.h): a collective or point-to-point call that has not completed
// after S seconds aborts the job naming the rank, the group and the operation (default 600; 0 = off).
//
// Without twinkle-run, programs run unchanged under
//   mpirun -np 8 --bind-to none --mca mpi_yield_when_idle 1 [--oversubscribe]
//          -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736 -x OMP_WAIT_POLICY=passive prog
// (`twinkle-run --dry-run ...` prints the exact line), and under Slurm:
//   srun --mpi=pmix -N 2 --ntasks-per-node=8 --cpu-bind=none
//        --export=ALL,MALLOC_MMAP_MAX_=0,MALLOC_TRIM_THRESHOLD_=68719476736,OMP_WAIT_POLICY=passive prog
// (twinkle::initialize detects PMIX_RANK / PMI_SIZE and calls MPI_Init_thread; local ranks come
// from SLURM_LOCALID).
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

struct Options {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0;
  std::string hostfile, master_addr, master_port, mpirun, rsh_agent, iface, comm_timeout;
  int max_restarts = 0;
  bool dry_run = false;
  std::vector<std::string> mpi_args;
  std::vector<std::string> program;  // PROGRAM ARGS...
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "twinkle-run: " << msg << "\n"
            << "usage: twinkle-run --nproc_per_node=N [--nnodes=M --node_rank=K --hostfile=F --rsh-agent=CMD "
               "--iface=IF --master_addr=A --master_port=P] [--max-restarts=R] [--comm-timeout=S] [--dry-run] "
               "[--mpirun=PATH] [--mpi-arg=ARG]... PROGRAM [ARGS...]\n";
  std::exit(2);
}

void print_help() {
  std::cout << "twinkle-run: launch PROGRAM on N ranks per node through OpenMPI's mpirun (torchrun-style).\n\n"
               "  --nproc_per_node=N   ranks on this node (default 1)\n"
               "  --nnodes=M           nodes (default 1; M > 1 needs --hostfile, run on node_rank 0 only)\n"
               "  --node_rank=K        this node's index (default 0)\n"
               "  --hostfile=F         OpenMPI hostfile for multi-node jobs\n"
               "  --rsh-agent=CMD      how mpirun reaches the other nodes (default ssh; env TWINKLE_RSH_AGENT)\n"
               "  --iface=IF[,IF]      network interfaces for MPI's TCP traffic (env TWINKLE_NET_IFACE)\n"
               "  --max-restarts=R     start a failed job again up to R times (default 0); programs resume\n"
               "                       with --resume auto\n"
               "  --comm-timeout=S     abort when a collective has not completed after S seconds\n"
               "                       (default 600, 0 = off; env TWINKLE_COMM_TIMEOUT)\n"
               "  --master_addr=A      accepted for torchrun compatibility (exported as TWINKLE_MASTER_ADDR)\n"
               "  --master_port=P      accepted for torchrun compatibility (exported as TWINKLE_MASTER_PORT)\n"
               "  --dry-run            print the mpirun command instead of running it\n"
               "  --mpirun=PATH        mpirun binary (default $TWINKLE_MPIRUN or 'mpirun')\n"
               "  --mpi-arg=ARG        extra mpirun argument (repeatable)\n";
}

int parse_int(const std::string& name, const std::string& v, int min) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || !end || *end != '\0' || x < min || x > 1 << 20)
    usage_error("--" + name + "=" + v + ": expected an integer >= " + std::to_string(min));
  return static_cast<int>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    }
    if (a.size() > 1 && a[0] == '-' && a[1] != '-')  // "-n 2" would become PROGRAM "-n" and mpirun's own -n
      usage_error("unknown option " + a + " (twinkle-run's options are torchrun's long ones, e.g. "
                  "--nproc_per_node=N; put -- before a PROGRAM whose name starts with '-')");
    if (a.rfind("--", 0) != 0) break;  // PROGRAM
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    for (auto& c : name)
      if (c == '-') c = '_';
    if (name == "dry_run") {
      if (has_value) usage_error("--dry-run takes no value");
      o.dry_run = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) usage_error("--" + name + " needs a value");
      value = argv[++i];
    }
    if (name == "nproc_per_node") o.nproc_per_node = parse_int(name, value, 1);
    else if (name == "nnodes") o.nnodes = parse_int(name, value, 1);
    else if (name == "node_rank") o.node_rank = parse_int(name, value, 0);
    else if (name == "hostfile") o.hostfile = value;
    else if (name == "master_addr") o.master_addr = value;
    else if (name == "master_port") o.master_port = value;
    else if (name == "mpirun") o.mpirun = value;
    else if (name == "rsh_agent") o.rsh_agent = value;
    else if (name == "iface") o.iface = value;
    else if (name == "max_restarts") o.max_restarts = parse_int(name, value, 0);
    else if (name == "comm_timeout") {
      parse_int(name, value, 0);  // 0 = no watchdog
      o.comm_timeout = value;
    }
    else if (name == "mpi_arg") o.mpi_args.push_back(value);
    else usage_error("unknown option --" + name);
  }
  for (; i < argc; ++i) o.program.push_back(argv[i]);
  if (o.program.empty()) usage_error("no PROGRAM given");
  if (o.rsh_agent.empty() && std::getenv("TWINKLE_RSH_AGENT")) o.rsh_agent = std::getenv("TWINKLE_RSH_AGENT");
  if (o.iface.empty() && std::getenv("TWINKLE_NET_IFACE")) o.iface = std::getenv("TWINKLE_NET_IFACE");
  if (o.node_rank >= o.nnodes)
    usage_error("--node_rank=" + std::to_string(o.node_rank) + " must be < --nnodes=" + std::to_string(o.nnodes));
  if (o.nnodes > 1 && o.hostfile.empty())
    usage_error("--nnodes=" + std::to_string(o.nnodes) +
                " needs --hostfile=F (OpenMPI starts every node's ranks from node_rank 0)");
  return o;
}

int cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool is_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

volatile sig_atomic_t g_child = 0, g_stop = 0;

void forward_signal(int sig) {
  g_stop = 1;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

/// Runs mpirun (`args`, null-terminated) as a child, again after each failure up to `max_restarts`
/// times (TWINKLE_RESTART_COUNT = the attempt, see the header); returns the last exit status
/// (128 + N for a child killed by signal N, 127 when mpirun cannot be started).
int run_with_restarts(std::vector<char*>& args, int max_restarts) {
  struct sigaction sa{};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  int status = 0;
  for (int attempt = 0;; ++attempt) {
    setenv("TWINKLE_RESTART_COUNT", std::to_string(attempt).c_str(), 1);  // mpirun forwards it (-x)
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
      std::cerr << "twinkle-run: fork failed: " << std::strerror(errno) << "\n";
      return 127;
    }
    if (pid == 0) {
      execvp(args[0], args.data());
      std::cerr << "twinkle-run: cannot start '" << args[0] << "': " << std::strerror(errno)
                << " (install openmpi-bin, or point --mpirun / TWINKLE_MPIRUN at mpirun)\n";
      _exit(127);
    }
    g_child = pid;
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
    status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 1;
    if (status == 0) {
      if (attempt > 0) std::cerr << "twinkle-run: the job completed after " << attempt << " restart(s)\n";
      return 0;
    }
    if (g_stop) {
      std::cerr << "twinkle-run: interrupted; not restarting (exit status " << status << ")\n";
      return status;
    }
    if (status == 127) return status;  // mpirun itself missing: a restart cannot help
    if (attempt == max_restarts) {
      std::cerr << "twinkle-run: the job failed (exit status " << status << ") and " << max_restarts
                << " restart(s) are used up; giving up with that status\n";
      return status;
    }
    std::cerr << "twinkle-run: the job failed (exit status " << status << "); restart " << attempt + 1 << " of "
              << max_restarts << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.node_rank != 0) {
    std::cerr << "twinkle-run: node_rank " << o.node_rank << ": with MPI the whole job is started from node_rank 0 "
              << "(mpirun reaches the other nodes through --hostfile); nothing to do here\n";
    return 0;
  }
  const int ncores = cores();
  const bool oversubscribed = o.nproc_per_node > ncores;
  const int total = o.nproc_per_node * o.nnodes;

  std::vector<std::string> cmd;
  cmd.push_back(!o.mpirun.empty() ? o.mpirun : is_set("TWINKLE_MPIRUN") ? std::getenv("TWINKLE_MPIRUN") : "mpirun");
  cmd.insert(cmd.end(), {"-np", std::to_string(total)});
  if (o.nnodes > 1) cmd.insert(cmd.end(), {"--hostfile", o.hostfile, "--map-by", "ppr:" + std::to_string(o.nproc_per_node) + ":node"});
  if (oversubscribed) cmd.push_back("--oversubscribe");
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.insert(cmd.end(), {"--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "--mca",
                         "orte_abort_on_non_zero_status", "1"});
  if (!o.rsh_agent.empty()) cmd.insert(cmd.end(), {"--mca", "plm_rsh_agent", o.rsh_agent});
  if (!o.iface.empty())
    cmd.insert(cmd.end(), {"--mca", "btl_tcp_if_include", o.iface, "--mca", "oob_tcp_if_include", o.iface});
  if (o.nnodes > 1)  // a node whose link dies is declared lost within ~20 s (see the header)
    cmd.insert(cmd.end(), {"--mca", "oob_tcp_keepalive_time", "10", "--mca", "oob_tcp_keepalive_intvl", "2",
                           "--mca", "oob_tcp_keepalive_probes", "3"});
  auto set_var = [&](const std::string& kv) { cmd.insert(cmd.end(), {"-x", kv}); };
  auto forward = [&](const std::string& name) { cmd.insert(cmd.end(), {"-x", name}); };
  if (is_set("OMP_NUM_THREADS")) forward("OMP_NUM_THREADS");
  else set_var("OMP_NUM_THREADS=" + std::to_string(oversubscribed ? 1 : std::max(1, ncores / o.nproc_per_node)));
  if (is_set("OMP_WAIT_POLICY")) forward("OMP_WAIT_POLICY");
  else set_var("OMP_WAIT_POLICY=passive");
  set_var("MALLOC_MMAP_MAX_=0");
  set_var("MALLOC_TRIM_THRESHOLD_=68719476736");
  for (const char* v : {"LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"})
    if (is_set(v)) forward(v);
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (kv.rfind("TWINKLE_", 0) == 0 && eq != std::string::npos && eq + 1 < kv.size()) {
      std::string name = kv.substr(0, eq);
      if (name != "TWINKLE_MPIRUN" && name != "TWINKLE_MASTER_ADDR" && name != "TWINKLE_MASTER_PORT" &&
          name != "TWINKLE_PYTHON" && name != "TWINKLE_RSH_AGENT" && name != "TWINKLE_NET_IFACE" &&
          name != "TWINKLE_COMM_TIMEOUT" && name != "TWINKLE_RESTART_COUNT")
        forward(name);
    }
  }
  if (!o.comm_timeout.empty()) setenv("TWINKLE_COMM_TIMEOUT", o.comm_timeout.c_str(), 1);
  if (is_set("TWINKLE_COMM_TIMEOUT")) forward("TWINKLE_COMM_TIMEOUT");
  if (o.max_restarts > 0) {
    setenv("TWINKLE_RESTART_COUNT", "0", 1);
    forward("TWINKLE_RESTART_COUNT");
  }
  if (!o.master_addr.empty()) {
    setenv("TWINKLE_MASTER_ADDR", o.master_addr.c_str(), 1);
    forward("TWINKLE_MASTER_ADDR");
  }
  if (!o.master_port.empty()) {
    setenv("TWINKLE_MASTER_PORT", o.master_port.c_str(), 1);
    forward("TWINKLE_MASTER_PORT");
  }
  const std::string& prog = o.program.front();
  const bool python = prog.size() > 3 && prog.compare(prog.size() - 3, 3, ".py") == 0;
  if (python) {
#ifdef TWINKLE_RUN_PYTHONPATH
    std::string pp = TWINKLE_RUN_PYTHONPATH;
    if (is_set("PYTHONPATH")) pp += std::string(":") + std::getenv("PYTHONPATH");
    setenv("PYTHONPATH", pp.c_str(), 1);
#endif
    if (is_set("PYTHONPATH")) forward("PYTHONPATH");
  }
  for (const auto& a : o.mpi_args) cmd.push_back(a);
  if (python) {
#ifdef TWINKLE_RUN_PYTHON
    cmd.push_back(is_set("TWINKLE_PYTHON") ? std::getenv("TWINKLE_PYTHON") : TWINKLE_RUN_PYTHON);
#else
    cmd.push_back(is_set("TWINKLE_PYTHON") ? std::getenv("TWINKLE_PYTHON") : "python3");
#endif
  }
  cmd.insert(cmd.end(), o.program.begin(), o.program.end());

  if (o.dry_run) {
    std::string line;
    for (const auto& a : cmd) line += (line.empty() ? "" : " ") + shell_quote(a);
    std::cout << line << "\n";
    return 0;
  }
  std::vector<char*> args;
  for (auto& a : cmd) args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  if (o.max_restarts == 0) {
    execvp(args[0], args.data());
    std::cerr << "twinkle-run: cannot start '" << cmd[0] << "': " << std::strerror(errno)
              << " (install openmpi-bin, or point --mpirun / TWINKLE_MPIRUN at mpirun)\n";
    return 127;
  }
  return run_with_restarts(args, o.max_restarts);
}
