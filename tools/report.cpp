#include "report.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

namespace cli {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

namespace {

std::string xml_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else if (c == '"') r += "&quot;";
    else r += c;
  }
  return r;
}

}  // namespace

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e5)) return fmt("%.3e", v);
  return fmt("%.4f", v);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  if (t < 60) return std::to_string(t) + "s";
  char buf[32];
  if (t < 3600) std::snprintf(buf, sizeof buf, "%d:%02d", int(t / 60), int(t % 60));
  else std::snprintf(buf, sizeof buf, "%d:%02d:%02d", int(t / 3600), int(t / 60 % 60), int(t % 60));
  return buf;
}

std::string metric_label(onnxtrain::Metric m) {
  switch (m) {
    case onnxtrain::Metric::kNone: return "";
    case onnxtrain::Metric::kR2: return "r2";
    default: return "accuracy";
  }
}

std::string record_json(const TrainRecord& r, const std::string& metric) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["epoch"] = r.epoch;
  auto add = [&](const std::string& k, double v) {
    if (!std::isnan(v)) j[k] = v;  // non-finite values are written as null
  };
  add("loss", r.loss);
  if (!metric.empty()) add(metric, r.metric);
  add("lr", r.lr);
  add("val_loss", r.val_loss);
  if (!metric.empty()) add("val_" + metric, r.val_metric);
  add("samples_per_s", r.samples_per_s);
  return j.dump();
}

namespace {

struct Series {
  std::string label, color;
  bool markers = false;
  std::vector<std::pair<double, double>> pts;
};

// Ticks at 1, 2 or 5 times a power of ten covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / mag;
  const double step = (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string panel(double x0, double y0, double w, double h, const std::string& title, const std::vector<Series>& series,
                  double xmax, double ylo_cap, double yhi_cap) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : series)
    for (const auto& [x, y] : s.pts)
      if (std::isfinite(y)) lo = std::min(lo, std::max(y, ylo_cap)), hi = std::max(hi, std::min(y, yhi_cap));
  std::ostringstream o;
  o << "<text x=\"" << x0 + w / 2 << "\" y=\"" << y0 - 10 << "\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">"
    << xml_escape(title) << "</text>\n";
  o << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << w << "\" height=\"" << h
    << "\" fill=\"white\" stroke=\"#444\"/>\n";
  if (!(lo <= hi)) {
    o << "<text x=\"" << x0 + w / 2 << "\" y=\"" << y0 + h / 2 << "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n";
    return o.str();
  }
  if (lo >= 0 && lo < hi - lo) lo = 0;
  if (hi - lo < 1e-12) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1), lo -= (hi - lo) * 0.5;
  const double pad = (hi - lo) * 0.05;
  lo -= lo == 0 ? 0 : pad;
  hi += pad;
  if (xmax <= 0) xmax = 1;
  auto X = [&](double x) { return x0 + x / xmax * w; };
  auto Y = [&](double y) { return y0 + h - (std::clamp(y, lo, hi) - lo) / (hi - lo) * h; };
  for (double t : ticks(lo, hi)) {
    o << "<line x1=\"" << x0 << "\" x2=\"" << x0 + w << "\" y1=\"" << Y(t) << "\" y2=\"" << Y(t)
      << "\" stroke=\"#e4e4e4\"/>\n";
    o << "<text x=\"" << x0 - 6 << "\" y=\"" << Y(t) + 4 << "\" text-anchor=\"end\" font-size=\"11\">" << tick_label(t)
      << "</text>\n";
  }
  for (double t : ticks(0, xmax)) {
    o << "<line x1=\"" << X(t) << "\" x2=\"" << X(t) << "\" y1=\"" << y0 + h << "\" y2=\"" << y0 + h + 4
      << "\" stroke=\"#444\"/>\n";
    o << "<text x=\"" << X(t) << "\" y=\"" << y0 + h + 17 << "\" text-anchor=\"middle\" font-size=\"11\">" << tick_label(t)
      << "</text>\n";
  }
  o << "<text x=\"" << x0 + w / 2 << "\" y=\"" << y0 + h + 34 << "\" text-anchor=\"middle\" font-size=\"12\">step</text>\n";
  double ly = y0 + 16;
  for (const auto& s : series) {
    if (s.pts.empty()) continue;
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.6\" points=\"";
    for (const auto& [x, y] : s.pts)
      if (std::isfinite(y)) o << X(x) << "," << Y(y) << " ";
    o << "\"/>\n";
    if (s.markers)
      for (const auto& [x, y] : s.pts)
        if (std::isfinite(y)) o << "<circle cx=\"" << X(x) << "\" cy=\"" << Y(y) << "\" r=\"2.5\" fill=\"" << s.color << "\"/>\n";
    o << "<line x1=\"" << x0 + w - 130 << "\" x2=\"" << x0 + w - 110 << "\" y1=\"" << ly - 4 << "\" y2=\"" << ly - 4
      << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"/>\n";
    o << "<text x=\"" << x0 + w - 104 << "\" y=\"" << ly << "\" font-size=\"11\">" << xml_escape(s.label) << "</text>\n";
    ly += 16;
  }
  return o.str();
}

}  // namespace

std::string curve_svg(const std::vector<TrainRecord>& rs, const std::string& metric, const std::string& title) {
  Series tl{"train", "#1f77b4", false, {}}, vl{"validation", "#d62728", true, {}}, tm{"train", "#1f77b4", false, {}},
      vm{"validation", "#d62728", true, {}};
  double xmax = 0;
  for (const auto& r : rs) {
    xmax = std::max(xmax, double(r.step));
    if (!std::isnan(r.loss)) tl.pts.emplace_back(r.step, r.loss);
    if (!std::isnan(r.val_loss)) vl.pts.emplace_back(r.step, r.val_loss);
    if (!std::isnan(r.metric)) tm.pts.emplace_back(r.step, r.metric);
    if (!std::isnan(r.val_metric)) vm.pts.emplace_back(r.step, r.val_metric);
  }
  const bool two = !metric.empty();
  const double W = two ? 960 : 520, H = 380, pw = 400, ph = 270;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " "
    << H << "\" font-family=\"sans-serif\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title) << "</text>\n";
  o << panel(70, 60, pw, ph, "loss", {tl, vl}, xmax, -INFINITY, INFINITY);
  if (two)
    o << panel(70 + pw + 90, 60, pw, ph, metric == "r2" ? "R\u00b2" : metric, {tm, vm}, xmax,
               metric == "r2" ? -1.0 : 0.0, 1.0);
  o << "</svg>\n";
  return o.str();
}

Progress::Progress(const std::string& mode_name, int64_t total_steps, int64_t epochs, const std::string& metric)
    : total_(total_steps), epochs_(epochs), metric_(metric) {
  const bool tty = ::isatty(2);
  mode_ = mode_name == "none" ? kNone : mode_name == "bar" ? kBar : mode_name == "plain" ? kPlain : tty ? kBar : kPlain;
  if (mode_ == kBar) {
    struct winsize ws{};
    width_ = ::ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 40 ? ws.ws_col : 100;
  }
  last_draw_ = last_plain_ = std::chrono::steady_clock::now();
}

void Progress::update(int64_t step, int64_t epoch, double loss, double metric, double sps, double eta) {
  if (mode_ == kNone) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = step >= total_;
  std::string stats = "step " + std::to_string(step) + "/" + std::to_string(total_) + " loss " + format_number(loss);
  if (!metric_.empty() && !std::isnan(metric))
    stats += metric_ == "accuracy" ? " acc " + fmt("%.1f%%", 100 * metric) : " " + metric_ + " " + format_number(metric);
  stats += " ";
  stats += sps >= 1e4 ? fmt("%.1fk", sps / 1e3) : fmt("%.0f", sps);
  stats += " samples/s ETA " + format_duration(eta);
  const std::string ep = "epoch " + std::to_string(std::min(epoch + 1, std::max<int64_t>(epochs_, 1))) + "/" +
                         (epochs_ > 0 ? std::to_string(epochs_) : std::string("?"));
  if (mode_ == kPlain) {
    if (!last && now - last_plain_ < std::chrono::seconds(5)) return;
    last_plain_ = now;
    std::fprintf(stderr, "%s %s\n", ep.c_str(), stats.c_str());
    std::fflush(stderr);
    return;
  }
  if (!last && now - last_draw_ < std::chrono::milliseconds(100) && drawn_) return;
  last_draw_ = now;
  const double frac = total_ ? std::clamp(double(step) / double(total_), 0.0, 1.0) : 0.0;
  const int barw = std::clamp(width_ - int(ep.size() + stats.size()) - 9, 10, 40);
  const int filled = int(frac * barw + 0.5);
  std::string bar;
  for (int i = 0; i < barw; ++i) bar += i < filled ? "\u2588" : "\u2591";
  std::fprintf(stderr, "\r%s %s %3d%% %s\x1b[K", ep.c_str(), bar.c_str(), int(frac * 100), stats.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::line(const std::string& s) {
  if (mode_ == kNone) return;
  if (drawn_) std::fprintf(stderr, "\r\x1b[K");
  drawn_ = false;
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (mode_ == kBar && drawn_) std::fprintf(stderr, "\r\x1b[K");
  drawn_ = false;
  std::fflush(stderr);
}

}  // namespace cli
