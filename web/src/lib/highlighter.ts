// The syntax highlighter (lowlight over highlight.js grammars), loaded on
// demand as its own chunk: code shows plain at once and coloured when the
// chunk has arrived. Only the languages below are bundled.
import { createLowlight } from "lowlight";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import csharp from "highlight.js/lib/languages/csharp";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import dockerfile from "highlight.js/lib/languages/dockerfile";
import go from "highlight.js/lib/languages/go";
import ini from "highlight.js/lib/languages/ini";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import kotlin from "highlight.js/lib/languages/kotlin";
import makefile from "highlight.js/lib/languages/makefile";
import markdown from "highlight.js/lib/languages/markdown";
import php from "highlight.js/lib/languages/php";
import python from "highlight.js/lib/languages/python";
import ruby from "highlight.js/lib/languages/ruby";
import rust from "highlight.js/lib/languages/rust";
import scss from "highlight.js/lib/languages/scss";
import shell from "highlight.js/lib/languages/shell";
import sql from "highlight.js/lib/languages/sql";
import swift from "highlight.js/lib/languages/swift";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";

export const lowlight = createLowlight({
  bash, c, cpp, csharp, css, diff, dockerfile, go, ini, java, javascript, json, kotlin, makefile,
  markdown, php, python, ruby, rust, scss, shell, sql, swift, typescript, xml, yaml,
});
lowlight.registerAlias({ bash: ["sh", "zsh", "console"], javascript: ["js", "jsx", "mjs", "cjs"], typescript: ["ts", "tsx", "mts"],
  python: ["py"], ruby: ["rb"], rust: ["rs"], yaml: ["yml"], ini: ["toml"], xml: ["html", "svg", "vue"], markdown: ["md"],
  csharp: ["cs"], kotlin: ["kt"], cpp: ["cc", "hpp", "cxx", "h++"], makefile: ["mk", "make"], dockerfile: ["docker"] });
