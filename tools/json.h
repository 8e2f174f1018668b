// A flat JSON object writer for the commands' --json output.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace cli {

inline std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += char(c);
    else if (c == '\n') r += "\\n";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else r += char(c);
  }
  return r + "\"";
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class JsonObject {
 public:
  JsonObject& add(const std::string& k, double v) { return raw(k, json_number(v)); }
  JsonObject& add(const std::string& k, const std::string& v) { return raw(k, json_string(v)); }
  JsonObject& add(const std::string& k, const char* v) { return raw(k, json_string(v)); }
  JsonObject& add(const std::string& k, bool v) { return raw(k, v ? "true" : "false"); }
  /// `v` is already JSON (an array or object).
  JsonObject& raw(const std::string& k, const std::string& v) {
    body_ += (body_.empty() ? "" : ", ") + json_string(k) + ": " + v;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

/// "[a, b]" of already-JSON items.
inline std::string json_array(const std::vector<std::string>& items) {
  std::string r = "[";
  for (size_t i = 0; i < items.size(); ++i) r += (i ? ", " : "") + items[i];
  return r + "]";
}

}  // namespace cli
