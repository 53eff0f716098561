#include "template/jinja.h"

#include <new>

#include "template/builtins.h"
#include "template/parser.h"
#include "template/render.h"

namespace hiq::jinja {

struct Template::Tree {
  Body body;
};

Status RenderOptions::validate() const {
  if (max_output_bytes == 0) return invalid_argument("RenderOptions: max_output_bytes must be positive");
  if (max_steps == 0) return invalid_argument("RenderOptions: max_steps must be positive");
  if (max_call_depth < 1) return invalid_argument("RenderOptions: max_call_depth must be at least 1");
  return Status::ok();
}

Result<Template> Template::parse(std::string_view source) {
  try {
    auto tree = std::make_shared<Tree>();
    tree->body = parse_template(source, ParseLimits{});
    return Template(std::move(tree));
  } catch (const TemplateError& e) {
    return invalid_argument(e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while parsing");
  }
}

Result<std::string> Template::render(const nlohmann::json& context) const { return render(context, RenderOptions{}); }

Result<std::string> Template::render(const nlohmann::json& context, const RenderOptions& options) const {
  return render_json(context, options);
}

Result<std::string> Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_json(context, options);
}

template <typename Json>
Result<std::string> Template::render_json(const Json& context, const RenderOptions& options) const {
  HIQ_RETURN_IF_ERROR(options.validate());
  if (!context.is_object()) return invalid_argument("chat template: the render context must be a JSON object");
  Renderer renderer(options);
  try {
    auto globals = std::make_shared<Scope>();
    add_globals(*globals);
    auto root = std::make_shared<Scope>();
    root->parent = globals;
    for (const auto& [key, value] : context.items()) root->variables[key] = Value::from_json(value);
    return renderer.run(tree_->body, root);
  } catch (const TemplateError& e) {
    switch (e.cause()) {
      case TemplateError::Cause::kRaised: return invalid_argument(e.what());
      case TemplateError::Cause::kLimit:
        return resource_exhausted("chat template line " + std::to_string(renderer.line()) + ": " + e.what());
      case TemplateError::Cause::kError: break;
    }
    return invalid_argument("chat template line " + std::to_string(renderer.line()) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while rendering");
  }
}

}  // namespace hiq::jinja
