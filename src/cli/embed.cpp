// tokenflow embed: a text as a measure of word vectors (points.npy, weights.npy).
#include "tokenflow/echo.hpp"
#include "tokenflow/embed.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "text_args.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow::cli {

namespace {

struct EmbedOptions {
  std::string vectors, out;
  TextArgument text{"", "", "--text", "--text-file"};
};

void run_embed(const EmbedOptions& o) {
  Stopwatch clock;
  const WordVectors vectors = read_word_vectors(o.vectors);
  if (!given(o.text)) throw InputError("", "--text", "the text is required (--text TEXT or --text-file FILE)");
  const TextMeasure t = text_measure(vectors, o.text);
  OutputDir out(o.out, {"embed", {"points.npy", "weights.npy", "words.txt", "summary.json"}, {}});
  write_points(out.staged("points.npy"), t.points);
  write_npy(out.staged("weights.npy"), t.weights.data(),
            {static_cast<std::size_t>(t.weights.size())});
  std::string words;
  for (const auto& w : t.words) words += w + "\n";
  write_text(out.staged("words.txt"), words);
  nlohmann::json s;
  s["command"] = "embed";
  s["status"] = "finished";
  s["n"] = t.words.size();
  s["d"] = vectors.dim;
  s["tokens"] = t.tokens;
  s["words"] = t.words;
  s["counts"] = t.counts;
  s["unknown"] = t.unknown;
  s["vectors"] = o.vectors;
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
  out.commit();
  if (!t.unknown.empty())
    std::cerr << fmt::format("tokenflow: {} unknown word{} left out: {}\n", t.unknown.size(),
                             t.unknown.size() == 1 ? "" : "s", echo_list(t.unknown));
  std::cout << fmt::format("tokenflow embed: {} distinct words of {} tokens in R^{} -> {}/points.npy, weights.npy\n",
                           t.words.size(), t.tokens, vectors.dim, o.out);
}

}  // namespace

void add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "A text as a measure: word vectors with weights for repeated words");
  cmd->add_option("--vectors", o->vectors, "Word vectors, word2vec/GloVe text format")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--text", o->text.text, "The text itself, as a string (lowercased, split on non-word characters)");
  cmd->add_option("--text-file", o->text.file, "A file holding the text (instead of --text)");
  cmd->add_option("--out", o->out, kOutHelp)->required();
  cmd->footer(
      "Outputs: points.npy (n x d, one row per distinct known word), weights.npy (n, counts / "
      "total),\n"
      "         words.txt, summary.json (words, counts, unknown words). Unknown words are reported "
      "on stderr.");
  cmd->callback([o] { run_embed(*o); });
}

}  // namespace tokenflow::cli
