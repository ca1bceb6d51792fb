// `twinkle plot METRICS.jsonl -o loss.png`: loss and learning-rate curves with gnuplot.
// A loss or lr that is null or non-finite (a skipped step, a step without labelled tokens)
// is drawn as a gap in its curve. Eval records of `twinkle train --val-dataset` (a line with "eval_loss"
// and no "loss", tools/twinkle/cmd_train.cpp) are drawn as the 'eval loss' curve on the loss axis.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "command.h"
#include "twinkle/core/error.h"

namespace {

int plot_main(int argc, char** argv) {
  CLI::App app{"Plot loss and learning rate from a metrics JSONL file (gnuplot)", "twinkle plot"};
  std::string metrics, out = "loss.png", title = "twinkle training";
  app.add_option("metrics", metrics, "metrics JSONL (one object per step: step, loss, lr, ...)")->required();
  app.add_option("-o,--output", out, "PNG file to write");
  app.add_option("--title", title, "plot title");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::ifstream in(metrics);
  twinkle::check(in.good(), "cannot open metrics file " + metrics);
  const std::string data = std::filesystem::temp_directory_path() / ("twinkle-plot-" + std::to_string(::getpid()) + ".dat");
  const std::string eval_data = data + ".eval";
  std::ofstream d(data), ed(eval_data);
  std::string line;
  int64_t n = 0, n_eval = 0, lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw twinkle::Error(metrics + ":" + std::to_string(lineno) + ": not valid JSON (" + e.what() + ")");
    }
    const std::string where = metrics + ":" + std::to_string(lineno);
    // A value that is null (what JSON writers make of NaN / inf, and twinkle's "no labelled
    // tokens") or a non-finite number is drawn as a gap: gnuplot's NaN is undefined.
    auto num = [&](const char* f, bool required, bool nullable) -> std::string {
      if (!j.is_object() || !j.contains(f)) {
        twinkle::check(!required, where + ": needs a numeric '" + f + "'");
        return "NaN";
      }
      if (nullable && j[f].is_null()) return "NaN";
      twinkle::check(j[f].is_number(), where + ": field '" + f + "' must be a number" +
                                           (nullable ? std::string(" or null") : std::string()) + ", got " + j[f].dump());
      const double v = j[f].get<double>();
      if (!std::isfinite(v)) {
        twinkle::check(nullable, where + ": field '" + f + "' must be finite");
        return "NaN";
      }
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      return buf;
    };
    if (j.is_object() && j.contains("eval_loss") && !j.contains("loss")) {  // an evaluation record
      ed << num("step", true, false) << " " << num("eval_loss", true, true) << "\n";
      ++n_eval;
      continue;
    }
    d << num("step", true, false) << " " << num("loss", true, true) << " " << num("lr", false, true) << "\n";
    ++n;
  }
  d.close();
  ed.close();
  twinkle::check(n > 0, metrics + " has no metrics lines");
  const std::string script = data + ".gp";
  // gnuplot single-quoted strings: a quote is written twice
  auto quote = [](const std::string& v) {
    std::string r = "'";
    for (char ch : v) r += ch == '\'' ? std::string("''") : std::string(1, ch);
    return r + "'";
  };
  std::ofstream g(script);
  g << "set terminal png size 900,500\n"
    << "set output " << quote(out) << "\n"
    << "set title " << quote(title) << " noenhanced\n"
    << "set xlabel 'step'\nset ylabel 'loss'\nset y2label 'learning rate'\nset ytics nomirror\nset y2tics\n"
    << "set grid\nset key top right\n"
    << "plot '" << data << "' using 1:2 with linespoints title 'loss' axes x1y1, '" << data
    << "' using 1:3 with lines title 'lr' axes x1y2";
  if (n_eval > 0) g << ", '" << eval_data << "' using 1:2 with linespoints title 'eval loss' axes x1y1";
  g << "\n";
  g.close();
  int rc = std::system(("gnuplot '" + script + "'").c_str());
  std::filesystem::remove(data);
  std::filesystem::remove(eval_data);
  std::filesystem::remove(script);
  twinkle::check(rc == 0, std::system("command -v gnuplot >/dev/null 2>&1") != 0
                              ? std::string("gnuplot is not installed (scripts/setup installs gnuplot-nox)")
                              : "gnuplot could not draw " + out + " (its message is above; is the directory writable?)");
  if (n_eval > 0)
    std::printf("wrote %s (%lld steps, %lld evaluations)\n", out.c_str(), static_cast<long long>(n),
                static_cast<long long>(n_eval));
  else
    std::printf("wrote %s (%lld steps)\n", out.c_str(), static_cast<long long>(n));
  return 0;
}

}  // namespace

TWINKLE_REGISTER_COMMAND("plot", "draw loss and learning-rate curves from a metrics JSONL file", plot_main);
