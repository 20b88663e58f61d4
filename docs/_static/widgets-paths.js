// The widget manager's modules work out where their icon fonts live from the path require.js gives each module
// (@jupyter-widgets/base, /controls, /html-manager, ...). Without these mappings that path is relative to the page,
// and every lesson page would ask for the fonts under its own folder. The longest matching prefix wins.
(function () {
  var folder = document.currentScript.src.replace(/\/[^/]*$/, "/widgets");
  require.config({
    paths: {
      "@jupyter-widgets": folder,
      "@jupyter-widgets/html-manager/dist": folder,
    },
  });
})();
