// template/ast.h — the parsed form of a template: expression and statement
// trees that template/render.cc walks. Built only by template/parser.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "template/value.h"

namespace hiq::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // children
    kTuple,      // children
    kDict,       // children: key0, value0, key1, value1, ...
    kAttr,       // children[0].name
    kItem,       // children[0][children[1]]
    kSlice,      // children[0][children[1]:children[2]:children[3]], each bound may be null
    kCall,       // children[0](children[1..]); the last keywords.size() arguments are keyword arguments
    kFilter,     // children[0] | name(children[1..]); children[0] is null in a filter block's chain
    kTest,       // children[0] is [not] name(children[1..])
    kNot,        // not children[0]
    kNegate,     // -children[0]
    kPlus,       // +children[0]
    kBinary,     // children[0] op children[1]
    kAnd,        // children[0] and children[1]
    kOr,         // children[0] or children[1]
    kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ... (chained, as in Python)
    kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
  };
  enum class Op { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kEq, kNe, kLt, kGt, kLe, kGe, kIn, kNotIn };

  Kind kind = Kind::kLiteral;
  int line = 0;
  Op op = Op::kAdd;           // kBinary
  std::vector<Op> ops;        // kCompare
  bool negated = false;       // kTest
  std::string name;           // kName, kAttr, kFilter, kTest
  Value value;                // kLiteral
  std::vector<ExprPtr> children;
  std::vector<std::string> keywords;  // kCall, kFilter, kTest
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ exprs[0] }}
    kIf,          // exprs[i] guards bodies[i]; an extra body is the else
    kFor,         // for names in exprs[0] [if exprs[1]]: bodies[0], else bodies[1]
    kSet,         // set names = exprs[0], or set names[0].attribute = exprs[0]
    kSetBlock,    // set names[0] [| exprs[0] filter chain] %} bodies[0] {% endset
    kMacro,       // macro names[0](names[1..]) with defaults exprs (null where none): bodies[0]
    kBreak,
    kContinue,
    kFilterBlock,  // filter exprs[0] (a chain whose innermost input is null): bodies[0]
    kGeneration,   // Hugging Face's {% generation %}: bodies[0], rendered as it is
  };

  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::string attribute;
  std::vector<std::string> names;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
};

}  // namespace hiq::jinja
