export * from "./types.js";
export * from "./reducer.js";
export * from "./conversation.js";
export * from "./rest.js";
export * from "./stream.js";
export * from "./pty.js";
