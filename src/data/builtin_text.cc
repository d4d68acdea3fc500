// The built-in corpus: about 1 MB of English-like text from a small grammar, generated
// once per process from a fixed seed with a self-contained PRNG (identical on every
// platform and standard library).
//
// Why a grammar rather than a bundled book: no file to ship or download, and a structure
// a byte-level model picks up in a few hundred steps: word spellings, "a"/"an" before
// consonants/vowels, subject-verb agreement, one tense per paragraph, questions whose
// answers repeat the question's words (something attention can copy), sums of small
// numbers, dialogue in quotes, and paragraph breaks. What stays unpredictable is which
// word the grammar picks, so the loss has a floor well above zero (about 1 nat per byte).
#include "src/data/builtin_text.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::data {
namespace {

class Rng {  // splitmix64
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }  // bias < 2^-50
  bool Chance(int percent) { return Below(100) < percent; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) { return v[static_cast<size_t>(Below(static_cast<int>(v.size())))]; }

 private:
  uint64_t state_;
};

struct Noun {
  std::string_view one, many;
};
struct Verb {
  std::string_view base, third, past;  // see, sees, saw
};

const std::vector<std::string_view> kNames = {"Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Hugo",
                                              "Iris", "Jonas", "Lena", "Marco", "Nora", "Oscar"};
const std::vector<Noun> kNouns = {
    {"cat", "cats"},         {"dog", "dogs"},         {"bird", "birds"},     {"child", "children"},
    {"farmer", "farmers"},   {"teacher", "teachers"}, {"river", "rivers"},   {"tree", "trees"},
    {"house", "houses"},     {"city", "cities"},      {"boat", "boats"},     {"book", "books"},
    {"garden", "gardens"},   {"mountain", "mountains"}, {"window", "windows"}, {"apple", "apples"},
    {"box", "boxes"},        {"letter", "letters"},   {"train", "trains"},   {"song", "songs"},
    {"owl", "owls"},         {"island", "islands"},   {"engine", "engines"}, {"umbrella", "umbrellas"}};
const std::vector<std::string_view> kAdjectives = {"small", "big",    "old",   "young", "red",    "green",
                                                   "quiet", "happy",  "dark",  "bright", "cold",  "warm",
                                                   "tall",  "gentle", "busy",  "strange", "empty", "orange"};
const std::vector<Verb> kTransitive = {
    {"see", "sees", "saw"},          {"find", "finds", "found"},      {"like", "likes", "liked"},
    {"carry", "carries", "carried"}, {"watch", "watches", "watched"}, {"paint", "paints", "painted"},
    {"follow", "follows", "followed"}, {"build", "builds", "built"},  {"open", "opens", "opened"},
    {"visit", "visits", "visited"},  {"draw", "draws", "drew"},       {"call", "calls", "called"}};
const std::vector<Verb> kIntransitive = {{"sleep", "sleeps", "slept"}, {"run", "runs", "ran"},
                                         {"sing", "sings", "sang"},    {"wait", "waits", "waited"},
                                         {"laugh", "laughs", "laughed"}, {"rest", "rests", "rested"}};
const std::vector<std::string_view> kPrepositions = {"near", "under", "behind", "in", "on", "across", "beside"};
const std::vector<std::string_view> kAdverbs = {"slowly", "quietly", "often", "again", "together", "happily"};
const std::vector<std::string_view> kDays = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                                             "Sunday"};
const std::vector<std::string_view> kSpeechVerbs = {"said", "whispered", "shouted", "replied"};

bool StartsWithVowel(std::string_view w) { return std::string_view("aeiou").find(w[0]) != std::string_view::npos; }

// A noun phrase and whether it is plural: "Anna", "the old cat", "an owl", "3 red boxes".
struct Phrase {
  std::string text;
  bool plural = false;
};

Phrase NounPhrase(Rng& rng, bool allow_name) {
  if (allow_name && rng.Chance(25)) return {std::string(rng.Pick(kNames)), false};
  const Noun& noun = rng.Pick(kNouns);
  std::string adjective = rng.Chance(50) ? std::string(rng.Pick(kAdjectives)) + " " : "";
  const int form = rng.Below(10);
  if (form < 2) {  // a counted plural
    int count = 2 + rng.Below(11);
    return {std::to_string(count) + " " + adjective + std::string(noun.many), true};
  }
  if (form < 4) return {"the " + adjective + std::string(noun.many), true};
  if (form < 7) return {"the " + adjective + std::string(noun.one), false};
  std::string_view next = adjective.empty() ? noun.one : std::string_view(adjective);
  return {(StartsWithVowel(next) ? "an " : "a ") + adjective + std::string(noun.one), false};
}

std::string VerbForm(const Verb& v, bool past, bool plural) {
  return std::string(past ? v.past : plural ? v.base : v.third);
}

void Capitalise(std::string& s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
}

std::string Statement(Rng& rng, bool past) {
  std::string out;
  if (rng.Chance(20)) {
    out += rng.Chance(50) ? "On " + std::string(rng.Pick(kDays)) + ", "
                          : "In " + std::to_string(1900 + rng.Below(125)) + ", ";
  }
  Phrase subject = NounPhrase(rng, true);
  out += subject.text + " ";
  if (rng.Chance(70)) {
    out += VerbForm(rng.Pick(kTransitive), past, subject.plural) + " " + NounPhrase(rng, true).text;
  } else {
    out += VerbForm(rng.Pick(kIntransitive), past, subject.plural);
    if (rng.Chance(50)) out.append(" ").append(rng.Pick(kAdverbs));
  }
  if (rng.Chance(40)) out.append(" ").append(rng.Pick(kPrepositions)).append(" the ").append(rng.Pick(kNouns).one);
  out += ".";
  Capitalise(out);
  return out;
}

// "Does the cat see a dog? Yes, the cat sees a dog." The answer copies the question.
std::string QuestionAndAnswer(Rng& rng, bool past) {
  Phrase subject = NounPhrase(rng, true);
  Phrase object = NounPhrase(rng, true);
  const Verb& verb = rng.Pick(kTransitive);
  std::string aux = past ? "Did" : subject.plural ? "Do" : "Does";
  std::string question = aux + " " + subject.text + " " + std::string(verb.base) + " " + object.text + "?";
  std::string answer = rng.Chance(50)
                           ? "Yes, " + subject.text + " " + VerbForm(verb, past, subject.plural) + " " + object.text + "."
                           : "No, " + subject.text + " " + std::string(past ? "did" : subject.plural ? "do" : "does") +
                                 " not.";
  return question + " " + answer;
}

std::string Arithmetic(Rng& rng) {
  int a = rng.Below(50), b = rng.Below(50);
  return std::to_string(a) + " plus " + std::to_string(b) + " is " + std::to_string(a + b) + ".";
}

std::string Dialogue(Rng& rng) {
  const bool question = rng.Chance(50);
  std::string quote;
  if (question) {
    Phrase thing = NounPhrase(rng, false);
    quote = (thing.plural ? "Where are " : "Where is ") + thing.text + "?";
  } else {
    quote = "I " + std::string(rng.Pick(kTransitive).base) + " " + NounPhrase(rng, true).text + ".";
  }
  Capitalise(quote);
  std::string_view speech = question ? (rng.Chance(70) ? "asked" : "whispered") : rng.Pick(kSpeechVerbs);
  return "\"" + quote + "\" " + std::string(speech) + " " + std::string(rng.Pick(kNames)) + ".";
}

std::string Generate() {
  constexpr size_t kTargetBytes = 1 << 20;
  Rng rng(20240521);
  std::string text;
  text.reserve(kTargetBytes + 4096);
  while (text.size() < kTargetBytes) {
    const bool past = rng.Chance(50);  // one tense per paragraph
    const int sentences = 3 + rng.Below(5);
    for (int i = 0; i < sentences; ++i) {
      const int kind = rng.Below(10);
      if (i > 0) text += ' ';
      text += kind < 6 ? Statement(rng, past) : kind < 8 ? QuestionAndAnswer(rng, past) : kind < 9 ? Arithmetic(rng) : Dialogue(rng);
    }
    text += "\n\n";
  }
  return text;
}

}  // namespace

const std::string& BuiltinText() {
  static const std::string text = Generate();  // thread-safe, once per process
  return text;
}

}  // namespace strata::data
