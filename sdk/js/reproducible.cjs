// Preloaded into componentize-js while `weir-build-js` builds a stage: componentize-js names its
// work folder with Math.random(), and that folder's path ends up inside the component. A fixed
// sequence gives the same path every time (builds are serialised by a lock, so it never clashes).
let seed = 20260101;
Math.random = () => {
  seed = (seed * 16807) % 2147483647;
  return seed / 2147483647;
};
