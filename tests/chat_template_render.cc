// chat_template_render — renders conversations with ChatTemplate for
// tests/chat_template_reference.py, which renders the same ones with Python
// jinja2 and compares. Input (a JSON file named by argv[1]):
//   {"template": str, "bos_token": str, "eos_token": str,
//    "now": [year, month, day, hour, minute, second],
//    "cases": [{"messages": [...], "add_generation_prompt": bool, "extra": {...}}]}
// Output (stdout): a JSON array with {"text": str} or {"error": str} per case.
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: chat_template_render CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::ordered_json input = nlohmann::ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!input.is_object() || !input.contains("template") || !input.contains("cases")) {
    std::cerr << "chat_template_render: " << argv[1] << " is not a cases file\n";
    return 2;
  }
  hiq::Result<hiq::ChatTemplate> chat = hiq::ChatTemplate::from_source(
      input["template"].get<std::string>(), input.value("bos_token", ""), input.value("eos_token", ""));
  if (!chat.is_ok()) {
    std::cerr << "chat_template_render: " << chat.status().to_string() << "\n";
    return 1;
  }
  if (input.contains("now")) {
    const nlohmann::ordered_json& now = input["now"];
    std::tm fixed{};
    fixed.tm_year = now[0].get<int>() - 1900;
    fixed.tm_mon = now[1].get<int>() - 1;
    fixed.tm_mday = now[2].get<int>();
    fixed.tm_hour = now[3].get<int>();
    fixed.tm_min = now[4].get<int>();
    fixed.tm_sec = now[5].get<int>();
    const std::time_t t = timegm(&fixed);  // fills the weekday and day of the year
    gmtime_r(&t, &fixed);
    hiq::jinja::RenderOptions options;
    options.now = [fixed] { return fixed; };
    chat->set_render_options(options);
  }
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const nlohmann::ordered_json& c : input["cases"]) {
    hiq::Result<std::string> out = chat->render(c["messages"], c.value("add_generation_prompt", false),
                                                c.value("extra", nlohmann::ordered_json::object()));
    if (out.is_ok()) results.push_back({{"text", *out}});
    else results.push_back({{"error", out.status().to_string()}});
  }
  std::cout << results.dump(-1, ' ', /*ensure_ascii=*/true) << "\n";
  return 0;
}
