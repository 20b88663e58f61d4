// The widget manager computes where its icon fonts live from the module path require.js gives its bundle; without
// this mapping that path is relative to the page, and every lesson page would ask for fonts under its own folder.
(function () {
  var folder = document.currentScript.src.replace(/\/[^/]*$/, "/widgets");
  require.config({ paths: { "@jupyter-widgets/html-manager/dist": folder } });
})();
